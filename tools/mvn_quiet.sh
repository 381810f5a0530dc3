#!/usr/bin/env bash
# mvn with its output held back: Maven 3.8 prints ANSI reset codes (ESC[0m) even with -q -B
# and -Dstyle.color=never, which would leave a row of them on `make setup`'s console. The
# output is shown, without the codes, only when Maven fails (its exit code is kept).
log=$(mktemp)
if mvn -q -B -Dstyle.color=never "$@" >"$log" 2>&1; then
  rm -f "$log"
else
  rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$log" >&2
  rm -f "$log"
  exit "$rc"
fi
