# Test helper (run with: sh setsid_wrapper.sh PIDFILE CMD [ARG...]).
# The llama-swap #804 wrapper that leaves our process group (issue 8 item 8): CMD runs in a
# session and process group of its own (`setsid`), its pid goes to PIDFILE, and the wrapper
# waits for it without exec. A signal to the wrapper's group never reaches CMD.
pidfile=$1
shift
setsid "$@" &
echo $! > "$pidfile.tmp" && mv "$pidfile.tmp" "$pidfile"
wait
