#!/usr/bin/env bash
# A real Slurm for moeforge's tests, on this machine, without systemd or cgroups: one node, or
# several (MOEFORGE_SLURM_NODES=N), each in a network namespace of its own.
#
#   tests/slurm/cluster.sh start    install (if missing), configure, start; wait until the nodes are idle;
#                                   print `export SLURM_CONF=...` on stdout (so: eval "$(... start)")
#   tests/slurm/cluster.sh stop     cancel all jobs, then end this cluster's daemons (slurm, munged)
#                                   and remove its network
#   tests/slurm/cluster.sh status   exit 0 when running and answering, 3 when stopped, 1 when half up
#   tests/slurm/cluster.sh env      print `export SLURM_CONF=...` for eval
#   tests/slurm/cluster.sh exec NODE CMD [ARG...]
#                                   run CMD on NODE of a multi-node cluster (its network, its hostname)
#
# Needs root (the daemons, the slurm/munge users, apt-get). Debian packages: slurmctld slurmd
# slurm-client munge (Slurm 22.05 on Debian 12). Everything a cluster writes lives in one private
# directory, $MOEFORGE_SLURM_DIR or <repo>/.slurm (gitignored; /var/tmp/moeforge-slurm-<hash> if the
# slurm user cannot reach the checkout): slurm.conf, state, spool, logs, PID files, and the
# cluster's own munged (socket, PID file, log and seed file in munge/; slurm.conf's
# AuthInfo=socket=... points auth/munge and cred/munge at that socket). Outside it, it may touch
# only: packages (apt), the slurm and munge users, /etc/hosts (one line, only when the short host
# name does not resolve), /etc/munge/munge.key (created only when missing; shared by all clusters)
# the lock file /run/lock/moeforge-slurm-setup.lock and, multi-node, the network below (iproute2
# installed if missing). A munged of the machine's (/run/munge) is neither used nor touched.
#
# Several clusters can run at once (two checkouts, two test sessions): give each its own directory
# and its own two free ports; they then share nothing but the packages and the munge key. A lock file
# in the directory serialises start/stop of one cluster; the machine-wide lock above serialises the
# setup steps (apt, users, /etc/hosts, key) between clusters.
#
# Multi-node (MOEFORGE_SLURM_NODES=N, N >= 2): nodes node1..nodeN, each a slurmd in its own network
# namespace and UTS namespace (its own address and hostname), all on a private /24 bridged to the
# machine's namespace, where slurmctld listens on the subnet's .1; munge is shared through its socket
# file. tests/slurm/cluster_net.sh builds and removes that network (names and subnet derived from the
# private directory, so two clusters never collide) and says what it touches outside the directory:
# network namespaces, a bridge and veths. Not Slurm's own multiple-slurmd mode, although Debian's
# 22.05 has it (`slurmd -N NODE` takes that node's Port= and accepts nodes sharing a NodeHostname): its
# nodes would share the machine's hostname and network, so a wrong MASTER_ADDR, a rank on the wrong node
# or a node's death would go unseen; namespaces give each node its own, as on a cluster. The node
# count is recorded in the private directory: stop, status and exec find it there. A running
# slurmctld keeps the slurm.conf it was started with: `start` again only starts what is missing (a
# killed node's slurmd).
#
# Stopping never kills by name: each daemon (slurmd and slurmctld, then munged) is ended through the
# PID file it wrote in the private directory, after checking that the PID still belongs to that
# program.
#
# Exit codes: 0 ok; 1 failure; 2 usage; 3 status: not running; 75 packages could not be installed
# (no package mirror reachable); 76 multi-node: this machine cannot create network namespaces or a
# bridge; 77 not root.
#
# Environment (all optional):
#   MOEFORGE_SLURM_DIR            private directory (absolute or relative to the current directory)
#   MOEFORGE_SLURMCTLD_PORT       default 6817 } each cluster on the machine needs its own two ports
#   MOEFORGE_SLURMD_PORT          default 6818 } (the tests ask the OS for free ones)
#   MOEFORGE_SLURM_CPUS           CPUs the node advertises (default: max(nproc, 4); a node may
#                                 advertise more than it has thanks to SlurmdParameters=config_overrides)
#   MOEFORGE_SLURM_START_TIMEOUT  seconds to wait for the nodes to become idle (default 60)
#   MOEFORGE_SLURM_NODES          nodes (default 1: the machine itself; 2 or more: network namespaces)
#   MOEFORGE_SLURM_SUBNET         multi-node: the cluster's /24 as three octets (default: one derived
#                                 from the private directory that no interface here uses)
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd -P)"

# others_can_enter DIR: every directory from / down to DIR is searchable by everyone (o+x), so the
# slurm user can reach a directory inside it.
others_can_enter() {
    local dir=$1 mode
    while :; do
        mode="$(stat -c %a -- "$dir")" || return 1
        ((8#$mode & 1)) || return 1
        [[ $dir == / ]] && return 0
        dir="$(dirname -- "$dir")"
    done
}

# The private directory: $MOEFORGE_SLURM_DIR, else <repo>/.slurm when the slurm user can reach it
# there, else (a checkout under a private home, say) /var/tmp/moeforge-slurm-<hash of the repo path>.
default_dir() {
    if others_can_enter "$REPO_ROOT"; then
        printf '%s\n' "$REPO_ROOT/.slurm"
    else
        printf '/var/tmp/moeforge-slurm-%s\n' "$(printf '%s' "$REPO_ROOT" | md5sum | cut -c1-12)"
    fi
}

SLURM_DIR="$(realpath -m -- "${MOEFORGE_SLURM_DIR:-$(default_dir)}")"
CONF="$SLURM_DIR/slurm.conf"
RUN_DIR="$SLURM_DIR/run"
STATE_DIR="$SLURM_DIR/state"
SPOOL_DIR="$SLURM_DIR/spool"
LOG_DIR="$SLURM_DIR/log"
CTLD_PIDFILE="$RUN_DIR/slurmctld.pid"
MUNGE_DIR="$SLURM_DIR/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
MUNGE_PIDFILE="$MUNGE_DIR/munged.pid"
MUNGE_KEY=/etc/munge/munge.key
SETUP_LOCK=/run/lock/moeforge-slurm-setup.lock
CTLD_PORT="${MOEFORGE_SLURMCTLD_PORT:-6817}"
SLURMD_PORT="${MOEFORGE_SLURMD_PORT:-6818}"
START_TIMEOUT="${MOEFORGE_SLURM_START_TIMEOUT:-60}"
PACKAGES=(slurmctld slurmd slurm-client munge)
EXIT_NO_NETNS=76

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The node count: what a started cluster recorded in its directory, else MOEFORGE_SLURM_NODES.
NODES_FILE="$SLURM_DIR/nodes"
NODES="${MOEFORGE_SLURM_NODES:-}"
if [[ -z $NODES && -s $NODES_FILE ]]; then
    read -r NODES <"$NODES_FILE" || true
fi
NODES="${NODES:-1}"
[[ $NODES =~ ^[1-9][0-9]?$ ]] || die "MOEFORGE_SLURM_NODES must be a number of nodes from 1 to 99, not '$NODES'"
MULTI=$((NODES > 1))
NODE_NAMES=()
if ((MULTI)); then
    for ((i = 1; i <= NODES; i++)); do
        NODE_NAMES+=("node$i")
    done
    # shellcheck source-path=SCRIPTDIR source=cluster_net.sh
    source "$SCRIPT_DIR/cluster_net.sh"
else
    NODE_NAMES=("$(hostname -s)")
fi

# slurmd_pidfile NODE: where NODE's slurmd writes its PID (slurm.conf SlurmdPidFile, %n the node).
slurmd_pidfile() {
    if ((MULTI)); then
        printf '%s/slurmd-%s.pid\n' "$RUN_DIR" "$1"
    else
        printf '%s/slurmd.pid\n' "$RUN_DIR"
    fi
}

print_env() { printf 'export SLURM_CONF=%q\n' "$CONF"; }

# --- processes, by PID file ---------------------------------------------------------------------

# read_pid FILE: print the PID in FILE; fail when FILE is missing or holds no PID.
read_pid() {
    local file=$1 pid=""
    [[ -s $file ]] || return 1
    read -r pid <"$file" || true
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
    printf '%s\n' "$pid"
}

# pid_is PID NAME: PID is alive and is the program NAME (guards against stale files and PID reuse).
# A zombie is not alive: daemons are reparented to PID 1, which may take seconds to reap them.
pid_is() {
    local pid=$1 name=$2 comm="" stat=""
    [[ -r /proc/$pid/comm ]] || return 1
    read -r comm <"/proc/$pid/comm" 2>/dev/null || return 1
    read -r stat <"/proc/$pid/stat" 2>/dev/null || return 1
    stat="${stat##*) }" # the state letter follows "(comm) "
    [[ $comm == "$name" && ${stat:0:1} != Z ]]
}

# running PIDFILE NAME: the daemon named NAME whose PID is in PIDFILE is alive.
running() {
    local pid
    pid="$(read_pid "$1")" || return 1
    pid_is "$pid" "$2"
}

# stop_pids PID NAME [PID NAME ...]: SIGTERM to each PID that is still NAME, wait up to 15 s for all
# of them to exit, then SIGKILL the rest. (All at once: each daemon takes a second or two to exit.)
stop_pids() {
    local -a pids=() names=()
    local i j left
    while (($# >= 2)); do
        if pid_is "$1" "$2"; then
            log "stopping $2 (pid $1)"
            kill -TERM "$1" 2>/dev/null || true
            pids+=("$1")
            names+=("$2")
        fi
        shift 2
    done
    for ((i = 0; i < 200; i++)); do
        left=0
        for j in "${!pids[@]}"; do
            pid_is "${pids[j]}" "${names[j]}" && left=1
        done
        ((left)) || return 0
        if ((i == 150)); then
            for j in "${!pids[@]}"; do
                if pid_is "${pids[j]}" "${names[j]}"; then
                    log "${names[j]} (pid ${pids[j]}) ignored SIGTERM for 15 s; sending SIGKILL"
                    kill -KILL "${pids[j]}" 2>/dev/null || true
                fi
            done
        fi
        sleep 0.1
    done
    die "daemons would not exit: ${pids[*]}"
}

# --- install ------------------------------------------------------------------------------------

if ((MULTI)); then
    PACKAGES+=(iproute2)
fi

need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        log "error: must run as root (daemons, users, apt-get)"
        exit 77
    fi
}

packages_present() {
    local f
    for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/bin/sinfo /usr/sbin/munged /usr/bin/munge; do
        [[ -x $f ]] || return 1
    done
    if ((MULTI)); then
        command -v ip >/dev/null || return 1
    fi
}

install_packages() {
    packages_present && return 0
    command -v apt-get >/dev/null || {
        log "error: apt-get not found; install ${PACKAGES[*]} by hand"
        exit 75
    }
    local apt_log="$LOG_DIR/apt.log"
    log "installing ${PACKAGES[*]} (log: $apt_log)"
    export DEBIAN_FRONTEND=noninteractive
    # Try with the package lists already on the machine first; `apt-get update` only when that fails
    # (no lists yet, or lists so old that the files they name are gone).
    # DPkg::Lock::Timeout: wait for another apt or dpkg to finish instead of failing on its lock.
    local -a apt=(apt-get -o DPkg::Lock::Timeout=300)
    if ! "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" >"$apt_log" 2>&1; then
        if ! "${apt[@]}" update >>"$apt_log" 2>&1 ||
            ! "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" >>"$apt_log" 2>&1; then
            tail -n 20 "$apt_log" >&2 || true
            log "error: could not install ${PACKAGES[*]} (is a Debian package mirror reachable?)"
            exit 75
        fi
    fi
    packages_present || die "packages installed but daemons missing; see $apt_log"
}

ensure_users() {
    local user
    for user in slurm munge; do
        id -u "$user" >/dev/null 2>&1 ||
            useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$user"
    done
}

# The node name becomes MASTER_ADDR for jobs: it must resolve.
ensure_hostname_resolves() {
    local host
    host="$(hostname -s)"
    if ! getent hosts "$host" >/dev/null; then
        log "adding '127.0.1.1 $host' to /etc/hosts (the node name must resolve)"
        printf '127.0.1.1\t%s\n' "$host" >>/etc/hosts
    fi
}

# --- munge --------------------------------------------------------------------------------------

# The machine's munge key, shared by every cluster (each munged only needs to read it).
ensure_munge_key() {
    [[ -s $MUNGE_KEY ]] && return 0
    log "creating $MUNGE_KEY"
    install -d -o munge -g munge -m 0700 "$(dirname -- "$MUNGE_KEY")"
    mungekey --create --keyfile="$MUNGE_KEY"
    chown munge:munge "$MUNGE_KEY"
    chmod 0400 "$MUNGE_KEY"
}

# setup: the steps that change the machine, not the private directory. Under a machine-wide lock
# so that two clusters starting at once do not race (two apt-get, two useradd, two /etc/hosts lines,
# two networks choosing one subnet).
setup() {
    exec 8>"$SETUP_LOCK"
    flock -w 600 8 || die "another cluster.sh holds $SETUP_LOCK"
    install_packages
    ensure_users
    ((MULTI)) || ensure_hostname_resolves
    ensure_munge_key
    ((!MULTI)) || net_up
    exec 8>&-
}

munge_works() {
    munge --socket="$MUNGE_SOCKET" -n </dev/null 2>/dev/null |
        unmunge --socket="$MUNGE_SOCKET" >/dev/null 2>&1
}

# This cluster's own munged, on its own socket: stopping one cluster never takes away the munged
# another cluster uses.
start_munge() {
    if ! running "$MUNGE_PIDFILE" munged; then
        rm -f -- "$MUNGE_PIDFILE"
        log "starting munged ($MUNGE_SOCKET)"
        runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_PIDFILE" \
            --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
            --key-file="$MUNGE_KEY" 9>&- || die "munged did not start; see $MUNGE_DIR/munged.log"
    fi
    local i
    for ((i = 0; i < 100; i++)); do
        running "$MUNGE_PIDFILE" munged && munge_works && return 0
        sleep 0.1
    done
    die "munged did not answer on $MUNGE_SOCKET; see $MUNGE_DIR/munged.log"
}

# --- slurm --------------------------------------------------------------------------------------

# node_lines: slurm.conf's node and partition lines (and where each slurmd keeps its files).
node_lines() {
    local cpus=$1 mem_mb=$2 node
    if ((!MULTI)); then
        cat <<LINES
SlurmdSpoolDir=$SPOOL_DIR
SlurmdPidFile=$(slurmd_pidfile "${NODE_NAMES[0]}")
SlurmdLogFile=$LOG_DIR/slurmd.log
NodeName=${NODE_NAMES[0]} NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=${NODE_NAMES[0]} Default=YES MaxTime=INFINITE State=UP
LINES
        return
    fi
    # %n: the node name, for the slurmd of each node
    printf 'SlurmdSpoolDir=%s/%%n\nSlurmdPidFile=%s/slurmd-%%n.pid\nSlurmdLogFile=%s/slurmd-%%n.log\n' \
        "$SPOOL_DIR" "$RUN_DIR" "$LOG_DIR"
    for node in "${NODE_NAMES[@]}"; do
        printf 'NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%s RealMemory=%s State=UNKNOWN\n' \
            "$node" "$(node_addr "$node")" "$node" "$cpus" "$mem_mb"
    done
    printf 'PartitionName=debug Nodes=node[1-%s] Default=YES MaxTime=INFINITE State=UP\n' "$NODES"
}

write_config() {
    local cpus mem_mb tmp ctld_host=localhost kind="a single-node test cluster"
    cpus="${MOEFORGE_SLURM_CPUS:-$(nproc)}"
    if [[ -z ${MOEFORGE_SLURM_CPUS:-} ]] && ((cpus < 4)); then
        cpus=4
    fi
    mem_mb="$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)"
    if ((MULTI)); then
        # "localhost" makes slurmctld take itself for the controller; everyone reaches it at the address
        ctld_host="localhost($(controller_addr))"
        kind="a test cluster of $NODES nodes, each in its own network namespace"
    fi
    tmp="$CONF.tmp.$$"
    cat >"$tmp" <<CONF
# Written by tests/slurm/cluster.sh: $kind. Regenerated on every start.
ClusterName=moeforge-test
SlurmctldHost=$ctld_host
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: step credentials live 30 s (default 120), and a requeued job waits that long before
# it may start again (launch.sbatch requeues jobs whose ranks saved a checkpoint on USR1).
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=30
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
EnforcePartLimits=ALL
MailProg=/bin/true
KillWait=5
MinJobAge=300
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2
StateSaveLocation=$STATE_DIR
SlurmctldPidFile=$CTLD_PIDFILE
SlurmctldLogFile=$LOG_DIR/slurmctld.log
$(node_lines "$cpus" "$mem_mb")
CONF
    chmod 0644 "$tmp"
    mv -f -- "$tmp" "$CONF"
}

prepare_dirs() {
    case $SLURM_DIR in
    *[[:space:]#,]*) die "the private directory must not contain blanks, '#' or ',': $SLURM_DIR" ;;
    esac
    # A Unix socket path holds at most 107 bytes.
    ((${#MUNGE_SOCKET} <= 107)) || die "private directory too long for munged's socket: $MUNGE_SOCKET"
    mkdir -p -- "$SLURM_DIR"
    chmod 0755 "$SLURM_DIR"
    install -d -m 0755 "$SPOOL_DIR"
    if ((MULTI)); then
        local node
        for node in "${NODE_NAMES[@]}"; do
            install -d -m 0755 "$SPOOL_DIR/$node"
        done
    fi
    install -d -o slurm -g slurm -m 0755 "$RUN_DIR" "$STATE_DIR" "$LOG_DIR"
    # munged checks its directory: owned by munge, writable by no one else, enterable by clients.
    install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
    # slurmctld runs as the slurm user: it must reach its state, log and PID files.
    if ! runuser -u slurm -- test -w "$STATE_DIR"; then
        die "user slurm cannot write $STATE_DIR (a parent directory is not searchable?); set MOEFORGE_SLURM_DIR"
    fi
}

show_logs() {
    local f
    for f in "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd*.log; do
        [[ -s $f ]] || continue
        log "--- last lines of $f"
        tail -n 15 "$f" >&2 || true
    done
}

# node_state NODE: the node's state as sinfo prints it (idle, mixed, allocated, down*, ...); empty if no answer.
node_state() {
    local out
    out="$(sinfo -h -N -n "$1" -o %T 2>/dev/null)" || out=""
    printf '%s\n' "${out%%$'\n'*}"
}

wait_for_pidfile() {
    local pidfile=$1 name=$2 i
    for ((i = 0; i < 100; i++)); do
        running "$pidfile" "$name" && return 0
        sleep 0.1
    done
    show_logs
    die "$name did not start (no live PID in $pidfile)"
}

# all_slurmds_running: every node's slurmd is alive.
all_slurmds_running() {
    local node
    for node in "${NODE_NAMES[@]}"; do
        running "$(slurmd_pidfile "$node")" slurmd || return 1
    done
}

wait_until_idle() {
    local deadline=$((SECONDS + START_TIMEOUT)) state node waiting
    local -A resumed=()
    while :; do
        waiting=""
        for node in "${NODE_NAMES[@]}"; do
            state="$(node_state "$node")"
            case $state in
            idle | mixed | allocated | completing) continue ;;
            down | down~ | down\* | drained | draining | drain)
                # ReturnToService=2 usually brings it back on registration; nudge it once if not.
                if [[ -z ${resumed[$node]:-} ]]; then
                    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
                    resumed[$node]=1
                fi
                ;;
            esac
            waiting+=" $node (${state:-no answer})"
            running "$(slurmd_pidfile "$node")" slurmd || {
                show_logs
                die "slurmd of $node exited"
            }
        done
        [[ -z $waiting ]] && return 0
        running "$CTLD_PIDFILE" slurmctld || {
            show_logs
            die "slurmctld exited"
        }
        if ((SECONDS >= deadline)); then
            show_logs
            die "not idle after ${START_TIMEOUT}s:$waiting"
        fi
        sleep 0.2
    done
}

# End-to-end probe after a fresh start: a batch job whose one step must run and succeed on every
# node. It also covers slurmctld's first seconds, in which it does not yet schedule batch jobs: a
# caller's first `sbatch --wait` would otherwise miss its first poll (2 s) and report only at the next (10 s).
probe_job() {
    local job state
    job="$(sbatch --parsable --job-name=cluster.sh-probe --time=1 --output=/dev/null \
        --nodes="$NODES" --ntasks-per-node=1 --wrap='srun true' 9>&-)" || {
        show_logs
        die "the probe job was refused"
    }
    job="${job%%;*}"
    # A job submitted while a node still completes a killed job's cleanup waits for the next scheduling
    # pass (sched_interval): give it the start timeout, not a fixed 30 s.
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        state="$(squeue -h -j "$job" -o %T 2>/dev/null)" || state=""
        [[ -z $state ]] && break
        sleep 0.05
    done
    state="$(scontrol show job "$job" 2>/dev/null)" || state=""
    if [[ $state != *"JobState=COMPLETED"* ]]; then
        printf '%s\n' "$state" >&2
        show_logs
        local why="${state#*JobState=}" reason="${state#*Reason=}"
        die "the probe job $job did not complete in ${START_TIMEOUT}s (JobState=${why%% *}, Reason=${reason%% *})"
    fi
}

# start_slurmd NODE: the node's slurmd (multi-node: on the node, in its namespaces).
start_slurmd() {
    local node=$1 pidfile
    pidfile="$(slurmd_pidfile "$node")"
    rm -f -- "$pidfile"
    if ((MULTI)); then
        log "starting slurmd of $node ($(node_addr "$node"))"
        on_node "$node" slurmd -f "$CONF" -N "$node" 9>&- || {
            show_logs
            die "slurmd of $node failed to start"
        }
    else
        log "starting slurmd"
        slurmd -f "$CONF" 9>&- || {
            show_logs
            die "slurmd failed to start"
        }
    fi
    wait_for_pidfile "$pidfile" slurmd
}

cmd_start() {
    need_root
    mkdir -p -- "$SLURM_DIR"
    # fd 9 holds the lock; daemons are started with 9>&- so they do not inherit it.
    exec 9>"$SLURM_DIR/.lock"
    flock -w 300 9 || die "another cluster.sh holds $SLURM_DIR/.lock"
    local recorded=""
    [[ -s $NODES_FILE ]] && read -r recorded <"$NODES_FILE"
    if [[ -n $recorded && $recorded != "$NODES" ]] && running "$CTLD_PIDFILE" slurmctld; then
        die "this cluster runs $recorded node(s), not $NODES: stop it first"
    fi
    printf '%s\n' "$NODES" >"$NODES_FILE"
    install -d -m 0755 "$LOG_DIR"
    [[ $CTLD_PORT =~ ^[0-9]+$ && $SLURMD_PORT =~ ^[0-9]+$ && $CTLD_PORT != "$SLURMD_PORT" ]] ||
        die "MOEFORGE_SLURMCTLD_PORT and MOEFORGE_SLURMD_PORT must be two different port numbers"
    setup
    prepare_dirs
    start_munge
    export SLURM_CONF="$CONF"
    local fresh=0 node
    if running "$CTLD_PIDFILE" slurmctld && all_slurmds_running; then
        log "already running ($SLURM_DIR)"
    else
        fresh=1
        if ! running "$CTLD_PIDFILE" slurmctld; then
            write_config # a running slurmctld keeps the configuration it was started with
            rm -f -- "$CTLD_PIDFILE"
            log "starting slurmctld"
            # -i: ignore unreadable state left by an earlier, killed run
            slurmctld -i -f "$CONF" 9>&- || {
                show_logs
                die "slurmctld failed to start"
            }
            wait_for_pidfile "$CTLD_PIDFILE" slurmctld
        fi
        for node in "${NODE_NAMES[@]}"; do
            running "$(slurmd_pidfile "$node")" slurmd || start_slurmd "$node"
        done
    fi
    wait_until_idle
    if ((fresh)); then
        probe_job
    fi
    log "$( ((MULTI)) && printf 'nodes %s are' "${NODE_NAMES[*]}" || printf 'node %s is' "${NODE_NAMES[0]}") up; ${SECONDS}s"
    print_env
}

cancel_jobs() {
    local jobs=() i
    mapfile -t jobs < <(squeue -h -o %A 2>/dev/null || true)
    ((${#jobs[@]})) || return 0
    log "cancelling ${#jobs[@]} job(s)"
    scancel -- "${jobs[@]}" 2>/dev/null || true
    # Let slurmd end the job steps (KillWait=5) before slurmd itself goes.
    for ((i = 0; i < 150; i++)); do
        mapfile -t jobs < <(squeue -h -o %A 2>/dev/null || true)
        ((${#jobs[@]})) || return 0
        sleep 0.1
    done
    log "jobs still listed after 15 s: ${jobs[*]}"
}

cmd_stop() {
    need_root
    [[ -d $SLURM_DIR ]] || return 0
    exec 9>"$SLURM_DIR/.lock"
    flock -w 300 9 || die "another cluster.sh holds $SLURM_DIR/.lock"
    export SLURM_CONF="$CONF"
    if running "$CTLD_PIDFILE" slurmctld; then
        cancel_jobs
    fi
    local -a daemons=() pidfiles=()
    local pid node
    for node in "${NODE_NAMES[@]}"; do
        pidfiles+=("$(slurmd_pidfile "$node")")
        pid="$(read_pid "${pidfiles[-1]}")" && daemons+=("$pid" slurmd)
    done
    pid="$(read_pid "$CTLD_PIDFILE")" && daemons+=("$pid" slurmctld)
    ((${#daemons[@]} == 0)) || stop_pids "${daemons[@]}"
    # munged last: the Slurm daemons authenticate through it until they are gone.
    if pid="$(read_pid "$MUNGE_PIDFILE")"; then
        stop_pids "$pid" munged
    fi
    rm -f -- "${pidfiles[@]}" "$CTLD_PIDFILE" "$MUNGE_PIDFILE"
    if ((MULTI)); then
        exec 8>"$SETUP_LOCK"
        flock -w 600 8 || die "another cluster.sh holds $SETUP_LOCK"
        net_down
        exec 8>&-
    fi
    rm -f -- "$NODES_FILE"
    log "stopped ($SLURM_DIR)"
}

cmd_status() {
    local ctld=stopped slurmds=0 node pidfile state answered=1
    running "$CTLD_PIDFILE" slurmctld && ctld="running (pid $(read_pid "$CTLD_PIDFILE"))"
    printf 'dir:       %s\nslurmctld: %s\n' "$SLURM_DIR" "$ctld"
    for node in "${NODE_NAMES[@]}"; do
        pidfile="$(slurmd_pidfile "$node")"
        if running "$pidfile" slurmd; then
            slurmds=$((slurmds + 1))
            printf 'slurmd:    running (pid %s)%s\n' "$(read_pid "$pidfile")" "$( ((MULTI)) && printf ' on %s' "$node")"
        else
            printf 'slurmd:    stopped%s\n' "$( ((MULTI)) && printf ' on %s' "$node")"
        fi
    done
    if running "$MUNGE_PIDFILE" munged; then
        printf 'munged:    running (pid %s, %s)\n' "$(read_pid "$MUNGE_PIDFILE")" "$MUNGE_SOCKET"
    else
        printf 'munged:    stopped\n'
    fi
    if [[ $ctld == stopped ]] && ((slurmds == 0)); then
        return 3
    fi
    if [[ $ctld == stopped ]] || ((slurmds < NODES)); then
        return 1
    fi
    export SLURM_CONF="$CONF"
    for node in "${NODE_NAMES[@]}"; do
        state="$(node_state "$node")"
        printf 'node:      %s %s\n' "$node" "${state:-(no answer)}"
        [[ -n $state ]] || answered=0
    done
    ((answered))
}

cmd_exec() {
    (($# >= 2)) || usage
    ((MULTI)) || die "exec runs a command on a node of a multi-node cluster (MOEFORGE_SLURM_NODES >= 2)"
    on_node "$@"
}

main() {
    (($# >= 1)) || usage
    case $1 in
    exec)
        shift
        cmd_exec "$@"
        return
        ;;
    esac
    (($# == 1)) || usage
    case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) print_env ;;
    -h | --help | help) usage ;;
    *) usage ;;
    esac
}

main "$@"
