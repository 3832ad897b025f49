package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterConfig configures Cluster. The zero value means the defaults.
type ClusterConfig struct {
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before the others mark it failed and a replica takes
	// over. Default 2 s (Redis's own default is 15 s, too slow for tests).
	NodeTimeout time.Duration

	// Access is every node's password, ACL users and TLS (with TLS, the
	// bus and replication use it too). Default: none.
	Access Access
}

// RedisCluster is a Redis Cluster of 3 primaries and 3 replicas, one per
// primary, built with the server's own tooling (redis-cli --cluster create).
type RedisCluster struct {
	nodes  []*Server
	access Access
}

// Cluster starts six cluster-enabled servers, joins them into a cluster of 3
// primaries with one replica each, and returns when every node reports
// cluster_state:ok, knows all six nodes, and every replica is in sync.
//
// cfg is optional (at most one): Cluster(t) uses the defaults.
func Cluster(t testing.TB, cfg ...ClusterConfig) *RedisCluster {
	t.Helper()
	Require(t)
	var c0 ClusterConfig
	switch len(cfg) {
	case 0:
	case 1:
		c0 = cfg[0]
	default:
		t.Fatal("redistest: Cluster takes at most one ClusterConfig")
	}
	return newCluster(t, c0)
}

func newCluster(t testing.TB, cfg ClusterConfig) *RedisCluster {
	t.Helper()
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 2 * time.Second
	}
	c := &RedisCluster{nodes: make([]*Server, 6), access: cfg.Access}
	// Sequential start: each server is up in milliseconds, and newServer's
	// t.Fatalf must run on the test goroutine.
	for i := range c.nodes {
		c.nodes[i] = newServer(t, &clusterNode{nodeTimeout: cfg.NodeTimeout}, cfg.Access)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if _, err := c.clusterCLI(ctx, args...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// Nodes returns the six servers in creation order. Which of them are
// primaries can change after a failover; see Primaries and Replicas.
func (c *RedisCluster) Nodes() []*Server { return c.nodes }

// Addrs returns the addresses of all nodes.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Primaries returns the nodes that currently report role master. Nodes that
// do not answer (killed or frozen) are left out.
func (c *RedisCluster) Primaries(ctx context.Context) []*Server { return c.byRole(ctx, "master") }

// Replicas returns the nodes that currently report role slave.
func (c *RedisCluster) Replicas(ctx context.Context) []*Server { return c.byRole(ctx, "slave") }

func (c *RedisCluster) byRole(ctx context.Context, role string) []*Server {
	var out []*Server
	for _, n := range c.nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := n.Info(cctx, "replication")
		cancel()
		if err == nil && info["role"] == role {
			out = append(out, n)
		}
	}
	return out
}

// NodeFor returns the node that currently serves key as a primary, asking
// the cluster with CLUSTER KEYSLOT and CLUSTER NODES.
func (c *RedisCluster) NodeFor(ctx context.Context, key string) (*Server, error) {
	for _, n := range c.nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		slotStr, err := n.CLI(cctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			cancel()
			continue
		}
		slot, err := strconv.Atoi(slotStr)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("redistest: CLUSTER KEYSLOT %q: %q", key, slotStr)
		}
		nodes, err := n.CLI(cctx, "CLUSTER", "NODES")
		cancel()
		if err != nil {
			continue
		}
		if addr := primaryForSlot(nodes, slot); addr != "" {
			for _, s := range c.nodes {
				if s.Addr() == addr {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node serves %q", key)
}

// primaryForSlot parses CLUSTER NODES output ("id ip:port@bus flags master
// ... slot-ranges") and returns the address of the primary owning slot.
func primaryForSlot(nodes string, slot int) string {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				continue // an importing/migrating marker
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					continue
				}
			}
			if slot >= a && slot <= b {
				return addr
			}
		}
	}
	return ""
}

// WaitHealthy waits until every node is healthy (see Server.WaitHealthy) and
// knows all six nodes.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	for _, n := range c.nodes {
		for {
			if err := n.WaitHealthy(ctx); err != nil {
				return err
			}
			ci, err := n.Info(ctx, "cluster-info")
			if err == nil && ci["cluster_known_nodes"] == strconv.Itoa(len(c.nodes)) && ci["cluster_state"] == "ok" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redistest: %s: cluster not converged: %w", n.Addr(), ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
