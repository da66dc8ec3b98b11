# shellcheck shell=bash
# The network of tests/slurm/cluster.sh's multi-node mode (sourced by cluster.sh; not run on its own).
#
# Each node is a network namespace with its own address on a private /24: a bridge in the machine's
# namespace holds the subnet's .1 (the controller's address: slurmctld runs there, so sbatch, scontrol
# and the tests reach it as they reach any daemon), and one veth pair per node joins the node's
# eth0 (.2, .3, ...) to the bridge. A node's processes (its slurmd, the job steps it starts, the ranks)
# see only that network, in a mount namespace of their own where the node's hosts file (every node
# and the controller by name) and an empty resolv.conf are bound over /etc/hosts and
# /etc/resolv.conf, and in a UTS namespace whose hostname is the node's name. (Not `ip netns exec`:
# it mounts a fresh /sys, without the cgroup filesystems slurmd needs.) Nothing routes out of the
# subnet: test traffic stays inside.
#
# Names, all derived from the private directory, so two clusters never share one: namespaces
# moeforge-<id>-<node>, bridge mfbr<id>, host-side veths mf<id>v<index> (<id>: 8 hex digits of the
# directory's md5); the hosts files are in <dir>/net/. The subnet is $MOEFORGE_SLURM_SUBNET (three octets, e.g. 10.77.3) or one derived
# from <id> in 10.64.0.0/10 that no interface of the machine uses; it is chosen under the
# machine-wide setup lock and written to <dir>/net/subnet, which stop reads to remove exactly what
# start made.
#
# Expects from cluster.sh: SLURM_DIR, NODES, NODE_NAMES, EXIT_NO_NETNS, log, die.

NET_DIR="$SLURM_DIR/net"
NET_ID="$(printf '%s' "$SLURM_DIR" | md5sum | cut -c1-8)"
BRIDGE="mfbr$NET_ID"

netns_of() { printf 'moeforge-%s-%s\n' "$NET_ID" "$1"; }

# node_index NODE: 1 for node1, ...; fails for a name that is not one of this cluster's nodes.
node_index() {
    local i
    for i in "${!NODE_NAMES[@]}"; do
        if [[ ${NODE_NAMES[i]} == "$1" ]]; then
            printf '%s\n' "$((i + 1))"
            return 0
        fi
    done
    return 1
}

subnet() { cat -- "$NET_DIR/subnet" 2>/dev/null; }
controller_addr() { printf '%s.1\n' "$(subnet)"; }
node_addr() { printf '%s.%s\n' "$(subnet)" "$(($(node_index "$1") + 1))"; }

# subnet_in_use A.B.C: an address or route of the machine's namespace lies in A.B.C.0/24.
subnet_in_use() {
    local prefix="$1."
    ip -4 -o addr show | awk '{ print $4 }' | grep -qF -- "$prefix" && return 0
    ip -4 route show | awk '{ print $1 }' | grep -qF -- "$prefix" && return 0
    return 1
}

choose_subnet() {
    local want="${MOEFORGE_SLURM_SUBNET:-}" h i candidate
    if [[ -n $want ]]; then
        if ! [[ $want =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
            ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255 || BASH_REMATCH[3] > 255)); then
            die "MOEFORGE_SLURM_SUBNET must be three octets (e.g. 10.77.3), not '$want'"
        fi
        subnet_in_use "$want" && die "MOEFORGE_SLURM_SUBNET $want.0/24 is already used on this machine"
        printf '%s\n' "$want"
        return 0
    fi
    h=$((16#$NET_ID))
    for ((i = 0; i < 64; i++)); do
        candidate="10.$((64 + (h + i) % 64)).$(((h >> 8) % 256))"
        if ! subnet_in_use "$candidate"; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    die "no free 10.x.y.0/24 for the cluster's network; set MOEFORGE_SLURM_SUBNET"
}

have_netns() { [[ -e /run/netns/$1 ]]; }

# net_up: the bridge, one namespace per node, the addresses and the names; what exists is kept
# (a second start of a running cluster changes nothing).
net_up() {
    command -v ip >/dev/null || die "ip (iproute2) is needed for a multi-node cluster"
    command -v nsenter >/dev/null || die "nsenter (util-linux) is needed for a multi-node cluster"
    install -d -m 0755 "$NET_DIR"
    local sub node ns veth i
    if [[ ! -s $NET_DIR/subnet ]]; then
        sub="$(choose_subnet)"
        printf '%s\n' "$sub" >"$NET_DIR/subnet"
    fi
    sub="$(subnet)"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "network: bridge $BRIDGE, $sub.1/24 (controller), one namespace per node"
        if ! ip link add "$BRIDGE" type bridge; then
            log "error: cannot create a network bridge here (no CAP_NET_ADMIN, or no bridge support)"
            exit "$EXIT_NO_NETNS"
        fi
        ip addr add "$sub.1/24" dev "$BRIDGE"
        ip link set "$BRIDGE" up
    fi
    for node in "${NODE_NAMES[@]}"; do
        ns="$(netns_of "$node")"
        i="$(node_index "$node")"
        veth="mf${NET_ID}v$i"
        if ! have_netns "$ns"; then
            if ! ip netns add "$ns"; then
                log "error: cannot create network namespaces here"
                exit "$EXIT_NO_NETNS"
            fi
            ip -n "$ns" link set lo up
        fi
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$ns"
            ip link set "$veth" master "$BRIDGE"
            ip link set "$veth" up
            ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
            ip -n "$ns" link set eth0 up
        fi
        write_node_etc "$node"
    done
}

# node_etc NODE: the directory of the files bound over /etc on NODE.
node_etc() { printf '%s/etc-%s\n' "$NET_DIR" "$1"; }

# write_node_etc NODE: the node's /etc/hosts (every node and the controller by name) and an empty
# resolv.conf (a name not in hosts fails at once instead of waiting on a name server out of reach).
write_node_etc() {
    local dir node
    dir="$(node_etc "$1")"
    install -d -m 0755 "$dir"
    {
        printf '127.0.0.1\tlocalhost\n'
        printf '%s\tslurmctld\n' "$(controller_addr)"
        for node in "${NODE_NAMES[@]}"; do
            printf '%s\t%s\n' "$(node_addr "$node")" "$node"
        done
    } >"$dir/hosts.tmp"
    mv -f -- "$dir/hosts.tmp" "$dir/hosts"
    : >"$dir/resolv.conf"
}

# on_node NODE CMD...: run CMD on NODE: in its network namespace, with its /etc/hosts and
# /etc/resolv.conf (a mount namespace of its own) and its hostname (a UTS namespace of its own).
on_node() {
    local node=$1
    shift
    node_index "$node" >/dev/null || die "no node '$node' in this cluster (nodes: ${NODE_NAMES[*]})"
    have_netns "$(netns_of "$node")" || die "node $node has no network (is the cluster started?)"
    # shellcheck disable=SC2016 # $1, $2 and $@ are the inner shell's
    nsenter --net="/run/netns/$(netns_of "$node")" -- unshare --mount --uts -- /bin/sh -c '
        mount --bind "$2/hosts" /etc/hosts &&
            { [ ! -e /etc/resolv.conf ] || mount --bind "$2/resolv.conf" /etc/resolv.conf; } &&
            hostname "$1" && shift 2 && exec "$@"' on_node "$node" "$(node_etc "$node")" "$@"
}

# node_pids NODE: every process in NODE's network namespace (its slurmd, step daemons and tasks).
node_pids() {
    local ns
    ns="$(netns_of "$1")"
    have_netns "$ns" || return 0
    ip netns pids "$ns" 2>/dev/null || true
}

# net_down: end what still runs on the nodes, then remove what net_up made and wait until it is gone.
# A namespace's deletion is asynchronous (the kernel tears its devices down from a workqueue), so its
# veth's host side could outlive `ip netns del` by a second, and a `start` right after a `stop` could
# collide with it. Deleting the host side first removes both ends of the pair synchronously; the wait
# below makes `stop` return only when no link or namespace of this cluster is left.
net_down() {
    local node ns veth pids=() pid i left
    for node in "${NODE_NAMES[@]}"; do
        mapfile -t -O "${#pids[@]}" pids < <(node_pids "$node")
    done
    if ((${#pids[@]})); then
        log "ending ${#pids[@]} process(es) left on the nodes: ${pids[*]}"
        for pid in "${pids[@]}"; do
            kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    for node in "${NODE_NAMES[@]}"; do
        veth="mf${NET_ID}v$(node_index "$node")"
        if ip link show "$veth" >/dev/null 2>&1; then
            ip link del "$veth" || log "could not remove veth $veth"
        fi
    done
    for node in "${NODE_NAMES[@]}"; do
        ns="$(netns_of "$node")"
        if have_netns "$ns"; then
            ip netns del "$ns" || log "could not remove network namespace $ns"
        fi
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" || log "could not remove bridge $BRIDGE"
    fi
    for ((i = 0; i < 100; i++)); do
        left="$(ip -o link show | grep -o "mf\(br\)\?${NET_ID}[v0-9]*" || true)"
        for node in "${NODE_NAMES[@]}"; do
            have_netns "$(netns_of "$node")" && left+=" $(netns_of "$node")"
        done
        [[ -z ${left// /} ]] && break
        sleep 0.1
    done
    [[ -z ${left// /} ]] || log "still present 10 s after stop: $left"
    rm -rf -- "$NET_DIR"
}
