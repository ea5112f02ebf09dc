# What benchmarks/card_quick.sh and benchmarks/serving_gpu.sh share (sourced, not run): a transcript of everything
# printed, steps with their own time limits, and a stop (SIGTERM, SIGINT, a caller's time limit) that ends the step
# running and keeps every line printed so far.
#
#   transcript FILE            from here on everything printed goes to the terminal and to FILE, line by line
#   step NAME SECONDS CMD...   CMD under `timeout SECONDS`; its output as it comes; "### NAME: exit N" after it
#
# Python's output is unbuffered (PYTHONUNBUFFERED): a step stopped at its limit keeps what it printed. The tee that
# writes the transcript ignores SIGTERM and SIGINT, so when a stop reaches every process of the group at once it still
# writes what the steps printed before they ended, then ends itself (end of its input). A step runs in the background
# under timeout (a process group of its own: a benchmark's child processes end with it) while the script waits for
# it, so a stop is acted on at once: the step is ended (timeout passes the signal on to its group), its end is
# printed, and the script exits with 143.
export PYTHONUNBUFFERED=1
exec 3>&1  # the terminal (or whatever ran the script): each transcript's tee writes there
step_name=""
step_pid=""

transcript() {
  exec > >(trap '' TERM INT; exec tee -a "$1" >&3) 2>&1
}

stopped() {
  trap '' TERM INT
  if [ -n "$step_pid" ]; then
    kill -TERM "$step_pid" 2>/dev/null
    wait "$step_pid" 2>/dev/null
  fi
  echo "### stopped by a signal${step_name:+ during $step_name}; the lines above are all it printed"
  exit 143
}
trap stopped TERM INT

step() {
  local limit=$2 rc
  step_name=$1
  shift 2
  echo "### $step_name (at most $limit s): $*"
  timeout "$limit" "$@" &
  step_pid=$!
  wait "$step_pid"
  rc=$?
  step_pid=""
  if [ "$rc" = 124 ]; then
    echo "### $step_name: exit 124 (its time limit of $limit s)"
  else
    echo "### $step_name: exit $rc"
  fi
  step_name=""
}
