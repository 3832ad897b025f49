package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The grey-node scenario shapes one node's traffic with tc on the loopback
// interface. It must never do that on the machine's own interfaces, so the
// lab runs it in a network namespace of its own (unshare -n): a loopback
// of its own that dies with the process. ownNetworkEnv marks the process
// the lab re-executed there.
const ownNetworkEnv = "HOLDFAST_LAB_OWN_NETNS"

// InOwnNetwork reports whether this process is the lab re-executed in a
// network namespace of its own: the marker is set and the namespace holds
// no interface but lo, so that tc cannot reach the machine's.
func InOwnNetwork() bool {
	if os.Getenv(ownNetworkEnv) != "1" {
		return false
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			return false
		}
	}
	return len(ifs) == 1
}

// EnterOwnNetwork brings up the loopback of the namespace the lab was
// re-executed in (a new namespace's lo is down). Call it first in main when
// InOwnNetwork.
func EnterOwnNetwork() error {
	if !InOwnNetwork() {
		return errors.New("not in a network namespace of the lab's own")
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// OwnNetworkCommand returns the command that runs this program again with
// args in a new network namespace (unshare -n), or an error saying why it
// cannot: unshare missing, or not allowed to make a namespace.
func OwnNetworkCommand(args []string) (*exec.Cmd, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, unshare, "-n", "true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unshare -n: %w: %s", err, strings.TrimSpace(string(out)))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(unshare, append([]string{"-n", "--", self}, args...)...)
	cmd.Env = append(os.Environ(), ownNetworkEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd, nil
}

// Shaping is what tc does to one node's traffic on lo: Ports are matched
// as source or destination port, Addrs (IPv4 addresses, each the source
// address of the node's own outgoing connections) as source or
// destination address; Loss, when not zero, drops that share of
// their packets; Partition drops them all.
//
// The kernel the lab was written on has no netem (nor tc actions), only
// htb, the fifos and u32 filters, so loss is built from those: a class
// whose queue holds nothing (pfifo limit 0) drops every packet sent to it,
// and u32 sends it the packets whose IP ID's low byte is one of
// round(256 × Loss) values spread over 1..255. The IP ID counts up per
// connection, so that is every (1/Loss)th packet of each connection, not a
// random draw; a retransmission has a new ID and goes through. Zero is left
// out: a SYN-ACK carries ID 0, and dropping every one would refuse
// connections instead of losing packets. Delay is not tc's here (see
// greyProxy).
type Shaping struct {
	Ports     []int
	Addrs     []string
	Loss      float64
	Partition bool
}

// shapeClass is the htb class that drops; 1:1 passes everything else.
const shapeClass = "1:4"

// Commands returns the tc commands that put s in place on dev, each as
// arguments to tc, from a device with no qdisc of its own.
func (s Shaping) Commands(dev string) [][]string {
	cmds := [][]string{
		{"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit"},
		{"class", "add", "dev", dev, "parent", "1:", "classid", shapeClass, "htb", "rate", "100gbit"},
		{"qdisc", "add", "dev", dev, "parent", shapeClass, "handle", "40:", "pfifo", "limit", "0"},
	}
	ids := s.lossIDs()
	var matches [][]string
	for _, p := range s.Ports {
		for _, dir := range []string{"sport", "dport"} {
			matches = append(matches, []string{"match", "ip", dir, strconv.Itoa(p), "0xffff"})
		}
	}
	for _, a := range s.Addrs {
		for _, dir := range []string{"src", "dst"} {
			matches = append(matches, []string{"match", "ip", dir, a + "/32"})
		}
	}
	for _, match := range matches {
		if s.Partition {
			cmds = append(cmds, filter(dev, match))
			continue
		}
		for _, id := range ids {
			cmds = append(cmds, filter(dev, slices.Concat(match, []string{"match", "u16", strconv.Itoa(id), "0x00ff", "at", "4"})))
		}
	}
	return cmds
}

func filter(dev string, match []string) []string {
	f := []string{"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32"}
	f = append(f, match...)
	return append(f, "flowid", shapeClass)
}

// lossIDs returns the IP ID low bytes to drop for s.Loss, spread evenly
// over 1..255.
func (s Shaping) lossIDs() []int {
	n := int(s.Loss*256 + 0.5)
	n = min(max(n, 0), 255)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1 + i*255/n
	}
	return ids
}

// ClearCommand returns the tc command that removes every shaping from dev.
func ClearCommand(dev string) []string { return []string{"qdisc", "del", "dev", dev, "root"} }

// shape replaces lo's shaping with s. It refuses outside the lab's own
// network namespace.
func shape(s Shaping) error {
	if !InOwnNetwork() {
		return errors.New("tc refused: not in a network namespace of the lab's own")
	}
	_ = runTC(ClearCommand("lo")) // nothing to remove the first time
	for _, c := range s.Commands("lo") {
		if err := runTC(c); err != nil {
			return err
		}
	}
	return nil
}

// unshape removes lo's shaping.
func unshape() error {
	if !InOwnNetwork() {
		return errors.New("tc refused: not in a network namespace of the lab's own")
	}
	return runTC(ClearCommand("lo"))
}

func runTC(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
