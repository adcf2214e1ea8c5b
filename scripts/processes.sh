# Shared by soak.sh and admission.sh (sourced): the processes a script
# starts, stopped when it exits, and waiting for a port to open.

pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	pids=()
}
trap cleanup EXIT

# wait_port waits up to 10 s for something to listen on 127.0.0.1:$1.
wait_port() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "port $1 never opened" >&2
	return 1
}
