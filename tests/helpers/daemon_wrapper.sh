# Test helper (run with: sh daemon_wrapper.sh PIDFILE CMD [ARG...]).
# A server that daemonizes a grandchild the classic way (daemon(3): fork, setsid, fork)
# and then runs CMD in its own place (exec): the first child starts a session of its own
# (`setsid`), forks the daemon and exits at once, so the daemon's parent is gone and its
# session is one no process of ours leads. The daemon ignores SIGTERM and SIGHUP, writes
# its pid to PIDFILE (atomically) and sleeps; only SIGKILL ends it. See daemonize.sh.
pidfile=$1
shift
setsid /bin/sh "$(dirname "$0")/daemonize.sh" "$pidfile" &
wait $!
exec "$@"
