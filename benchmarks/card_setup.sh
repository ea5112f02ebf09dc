# setup.sh of a wheels folder (benchmarks/gpu_wheels.sh copies this file there). On the card's machine, from the
# project root:
#
#     source DIR/setup.sh    # then the benchmarks, e.g.: source .whl/setup.sh && bash benchmarks/card_quick.sh OUT
#
# The carried wheels go into $CARD_SITE (default /tmp/site), which goes first on PYTHONPATH with the project root;
# benchmarks/card_env.py then makes coqui-tts importable under torch >= 2.9 without torchcodec, imports the serving
# engine and decodes the demo voice. It ends with one line: "card ready: ..." or "card set-up FAILED ..." (status 1).
# Python's output is unbuffered from here on: a command stopped at its time limit keeps what it printed.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=${CARD_SITE:-/tmp/site}
if ! installed=$(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$here"/*.whl 2>&1); then
  echo "card set-up FAILED at installing the wheels of $here: $(printf '%s\n' "$installed" | grep -v '^\s*$' | tail -n 1)"
  return 1 2>/dev/null || exit 1
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 benchmarks/card_env.py "$site" || { return 1 2>/dev/null || exit 1; }
