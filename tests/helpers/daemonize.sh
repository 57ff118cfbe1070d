# Test helper: the first child of daemon_wrapper.sh, a session leader. It forks the daemon
# (SIGTERM and SIGHUP ignored, inherited through the exec of `sleep`) and exits.
trap '' TERM HUP
/bin/sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 600' daemon "$1" &
