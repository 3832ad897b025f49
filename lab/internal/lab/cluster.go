package lab

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// Cluster is a Redis Cluster for the scenarios that fail some nodes of
// many: 3 primaries and 3 replicas built with the server's own tooling
// (redis-cli --cluster create) by StartCluster, or fleet-loss's 30 + 30
// joined by hand by StartFleet.
type Cluster struct {
	Nodes []*redistest.Process // in creation order; roles change on failover, ask Role
}

// StartCluster starts six cluster-enabled servers and joins them. The node
// timeout is short (2 s) so that failovers happen within a scenario.
func StartCluster(ctx context.Context) (*Cluster, error) { return StartClusterWith(ctx, nil) }

// StartClusterWith is StartCluster with nodeArgs(i), when not nil, added to
// the command line of the i-th node started. The first three become the
// primaries.
func StartClusterWith(ctx context.Context, nodeArgs func(i int) []string) (_ *Cluster, err error) {
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range 6 {
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			// The replicas' first sync starts at once, not after the
			// default 5 s wait for more replicas: each scenario mode
			// starts a Cluster of its own, so the wait added about 5 s to
			// every one. A scenario that times a resync sets the default
			// back before it (replica-resync).
			"--repl-diskless-sync-delay", "0",
		}
		if nodeArgs != nil {
			args = append(args, nodeArgs(i)...)
		}
		s, err := redistest.Launch(redistest.Options{Args: args})
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, lastLines(string(out), 5))
	}
	if err := c.WaitHealthy(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// every replica has finished its sync.
func (c *Cluster) WaitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if last = c.healthy(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not healthy within %v: %w", limit, last)
}

func (c *Cluster) healthy() error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := Command(n.Addr(), 300*time.Millisecond, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(st, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", n.Addr())
		}
		role, err := Role(n.Addr())
		if err != nil {
			return err
		}
		if role == "replica" {
			link, err := InfoField(n.Addr(), "replication", "master_link_status")
			if err != nil {
				return err
			}
			if link != "up" {
				return fmt.Errorf("%s: master_link_status %s", n.Addr(), link)
			}
		}
	}
	return nil
}

// Role returns "primary" or "replica" for the node at addr.
func Role(addr string) (string, error) {
	r, err := InfoField(addr, "replication", "role")
	switch {
	case err != nil:
		return "", err
	case r == "master":
		return "primary", nil
	case r == "slave":
		return "replica", nil
	}
	return "", errors.New("unknown role " + r)
}

// Close stops every node.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
