"""chaosckpt's start-up hook, put first on PYTHONPATH of a job under test.

Starts the agent when the run directory variable is set, then runs the
``sitecustomize`` this one shadows, if there is one further along ``sys.path``.
"""


def _chaosckpt_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("CHAOSCKPT_RUN_DIR"):
        try:
            if "chaosckpt" not in sys.modules:
                import importlib.util

                package_dir = os.path.dirname(os.path.dirname(here))
                spec = importlib.util.spec_from_file_location(
                    "chaosckpt",
                    os.path.join(package_dir, "__init__.py"),
                    submodule_search_locations=[package_dir],
                )
                module = importlib.util.module_from_spec(spec)
                sys.modules["chaosckpt"] = module
                spec.loader.exec_module(module)
            from chaosckpt.agent import runtime

            runtime.start()
        except Exception as exc:  # the job must run even if the agent cannot
            sys.stderr.write(f"chaosckpt agent failed to start: {type(exc).__name__}: {exc}\n")

    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_chaosckpt_boot()
del _chaosckpt_boot
