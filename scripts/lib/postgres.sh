# A throwaway PostgreSQL server on 127.0.0.1 for the storage tests (real server, not a mock).
# pg_start <state dir> <port> prints the connection URL; pg_stop <state dir> stops it.
pg_start() {
  local dir=$1 port=$2 bin; bin=$(pg_bin_dir) || { echo "error: PostgreSQL server binaries not found" >&2; return 1; }
  local run=(); [[ $(id -u) -eq 0 ]] && run=(runuser -u postgres --)
  rm -rf "$dir"; mkdir -p "$dir"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
  "${run[@]}" "$bin/initdb" -D "$dir/data" -U orb --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; return 1; }
  "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" start >&2 \
    || { cat "$dir/server.log" >&2; return 1; }
  "${run[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U orb orb_test >&2
  echo "postgres://orb@127.0.0.1:$port/orb_test"
}

pg_stop() {
  local dir=$1 bin; bin=$(pg_bin_dir) || return 0
  [[ -d "$dir/data" ]] || return 0
  local run=(); [[ $(id -u) -eq 0 ]] && run=(runuser -u postgres --)
  "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}
