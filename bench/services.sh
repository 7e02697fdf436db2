# Sourced by scripts/bench.sh and bench/profile.sh: starts the local PostgreSQL and RabbitMQ
# if they are down and gives the bench an empty RabbitMQ virtual host of its own.
pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
rabbitmqctl -q status >/dev/null 2>&1 || rabbitmq-server -detached
rabbitmqctl -q await_startup --timeout 120
rabbitmqctl -q delete_vhost yardmaster_bench >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost yardmaster_bench
rabbitmqctl -q set_permissions -p yardmaster_bench guest ".*" ".*" ".*"
