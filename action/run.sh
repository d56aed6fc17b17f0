#!/usr/bin/env bash
# The GitHub Action's main step (action.yml): run chaosckpt's suite, or one trial, then render the Markdown report
# into the job summary and give its exit status (as --fail-on asks) and results folder as the step's outputs. The
# status is not this script's: the action's last step fails the job with it, after the results are uploaded.
set -uo pipefail
results="${CHAOSCKPT_RESULTS:-chaosckpt-results}"
read -r -a job <<< "${CHAOSCKPT_JOB:-}"
read -r -a extra <<< "${CHAOSCKPT_ARGS:-}"
if [ -n "${CHAOSCKPT_SCENARIO:-}" ]; then
    chaosckpt run --scenario "$CHAOSCKPT_SCENARIO" --out "$results" "${extra[@]}" "${job[@]}"
else
    chaosckpt suite --out "$results" "${extra[@]}" "${job[@]}"
fi
ran=$?
folder=$(ls -1dt "$results"/*/ 2>/dev/null | head -n 1)
if [ "$ran" = 2 ] || [ -z "$folder" ]; then
    echo "chaosckpt exited with status $ran before any result was written" >> "${GITHUB_STEP_SUMMARY:-/dev/null}"
    echo "status=$ran" >> "${GITHUB_OUTPUT:-/dev/null}"
    exit 0
fi
folder="${folder%/}"
chaosckpt report "$folder" --markdown "$folder/summary.md" --fail-on "${CHAOSCKPT_FAIL_ON:-status}"
status=$?
cat "$folder/summary.md" >> "${GITHUB_STEP_SUMMARY:-/dev/null}"
{
    echo "results=$folder"
    echo "status=$status"
} >> "${GITHUB_OUTPUT:-/dev/null}"
