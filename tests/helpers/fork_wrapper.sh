# Test helper (run with: sh fork_wrapper.sh MODE PIDFILE CMD [ARG...]).
# A wrapper that forks instead of exec-ing its command, like the one in llama-swap #804
# (FC-12): CMD runs in the background, its pid goes to PIDFILE, then
#   MODE wait:  the wrapper waits for CMD ("$@" without exec);
#   MODE crash: the wrapper dies of SIGABRT at once, leaving CMD behind.
mode=$1
pidfile=$2
shift 2
"$@" &
echo $! > "$pidfile.tmp" && mv "$pidfile.tmp" "$pidfile"
echo wrapper-out
echo wrapper-err >&2
case $mode in
    wait) wait ;;
    crash) kill -ABRT $$ ;;
esac
