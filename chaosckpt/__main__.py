from chaosckpt.conductor.cli import main

main()
