package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"time"

	"github.com/redis/rueidis"
)

// Lua scripts and the commands the tier sends to slots' primaries.
//
// rueidis's Lua.ExecMulti sends SCRIPT LOAD to every node of a Cluster on
// every call and fails the whole call when one node fails, so a single
// frozen node failed every multi-script call of the tier. A script here is
// sent as EVALSHA to the key's node only; a node that does not have it
// (restarted, SCRIPT FLUSH, a new primary) answers NOSCRIPT and gets the
// body with EVAL once, which also loads it there.
//
// A multi-key command whose keys are split between two nodes in the middle
// of a slot migration is answered TRYAGAIN. rueidis retries that only with
// its retries on, which the tier keeps off (see the package comment), so
// send retries it itself after a short backoff, doubling, while the call's
// deadline leaves room. MOVED and ASK are followed by rueidis's Cluster
// client itself.

// script is a Lua script with its SHA1, computed once.
type script struct {
	body string
	sha  string
}

func newScript(body string) *script {
	sum := sha1.Sum([]byte(body))
	return &script{body: body, sha: hex.EncodeToString(sum[:])}
}

// call is the command that runs s with keys, which must share a hash slot,
// and args.
func (s *script) call(keys []string, args ...string) command {
	return command{key: keys[0], script: s, keys: keys, args: args}
}

// command is one command for the primary of key's hash slot: either plain,
// or a call of script. It is built anew for every send, because rueidis
// recycles a command once it has been answered.
type command struct {
	key   string
	plain func(rueidis.Builder) rueidis.Completed

	script     *script
	keys, args []string
}

// plainCommand is a command that is not a script; key is one of its keys.
func plainCommand(key string, build func(rueidis.Builder) rueidis.Completed) command {
	return command{key: key, plain: build}
}

// build builds the command with b; eval sends a script's body rather than
// its SHA1.
func (c command) build(b rueidis.Builder, eval bool) rueidis.Completed {
	switch {
	case c.script == nil:
		return c.plain(b)
	case eval:
		return b.Eval().Script(c.script.body).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	return b.Evalsha().Sha1(c.script.sha).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
}

// tryAgainBackoff is the first wait before a command answered TRYAGAIN is
// sent again; it doubles with each retry. A migration moves a slot's keys
// in milliseconds, so the first retries are quick.
const tryAgainBackoff = 5 * time.Millisecond

// maxSendRounds bounds the rounds of send when ctx has no deadline.
const maxSendRounds = 10

// send sends cmds pipelined through c and returns their results in order.
// Commands answered NOSCRIPT go again as EVAL, and commands answered
// TRYAGAIN again after a backoff, together in the next pipeline; a
// TRYAGAIN whose backoff would pass ctx's deadline is returned as it is.
func send(ctx context.Context, c rueidis.Client, cmds []command) []rueidis.RedisResult {
	results := make([]rueidis.RedisResult, len(cmds))
	eval := make([]bool, len(cmds))
	pending := make([]int, len(cmds))
	for i := range pending {
		pending[i] = i
	}
	backoff := tryAgainBackoff
	for round := 0; len(pending) > 0 && round < maxSendRounds; round++ {
		built := make(rueidis.Commands, len(pending))
		for j, i := range pending {
			built[j] = cmds[i].build(c.B(), eval[i])
		}
		var rs []rueidis.RedisResult
		if len(built) == 1 {
			rs = []rueidis.RedisResult{c.Do(ctx, built[0])}
		} else {
			rs = c.DoMulti(ctx, built...)
		}
		again := pending[:0:0]
		wait := false
		for j, i := range pending {
			results[i] = rs[j]
			re, ok := rueidis.IsRedisErr(rs[j].Error())
			switch {
			case !ok:
			case re.IsNoScript() && cmds[i].script != nil && !eval[i]:
				eval[i] = true
				again = append(again, i)
			case re.IsTryAgain():
				wait = true
				again = append(again, i)
			}
		}
		if wait {
			if !sleepWithin(ctx, backoff) {
				break
			}
			backoff *= 2
		}
		pending = again
	}
	return results
}

// sleepWithin waits d unless that would pass ctx's deadline or ctx ends
// first, and reports whether it waited all of d.
func sleepWithin(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
