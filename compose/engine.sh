#!/bin/bash
# Make sure a Docker engine answers, for `make test-containers` and the compose stack.
#   compose/engine.sh ensure   an engine answers, or: installs Docker (root on Debian) and
#                              starts dockerd in the background, or says what is missing
#   compose/engine.sh stop     stops the dockerd that `ensure` started, and nothing else
set -euo pipefail
state=${XDG_STATE_HOME:-$HOME/.local/state}/globalstore
pidfile=$state/dockerd.pid

answers() { docker info >/dev/null 2>&1; }

ensure() {
    if command -v docker >/dev/null && answers; then
        echo "docker engine: answering"
        return
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "error: no Docker engine answers. Start one (or join the docker group); on Debian" \
            "as root this target installs and starts one itself." >&2
        exit 2
    fi
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ||
        missing+=(docker-compose)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi
    mkdir -p "$state"
    nohup dockerd >"$state/dockerd.log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 120); do
        if answers; then
            echo "docker engine: started in $SECONDS s (pid $(cat "$pidfile"), log $state/dockerd.log)"
            return
        fi
        sleep 0.5
    done
    echo "error: dockerd did not answer within 60 s; its log ends with:" >&2
    tail -n 20 "$state/dockerd.log" >&2
    exit 1
}

stop() {
    [ -f "$pidfile" ] || return 0
    local pid
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        echo "docker engine: stopped (pid $pid)"
    fi
    rm -f "$pidfile"
}

case "${1:-}" in
    ensure) ensure ;;
    stop) stop ;;
    *) echo "usage: $0 ensure|stop" >&2; exit 2 ;;
esac
