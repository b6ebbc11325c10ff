package main

// The torture run's attacks: the hostile soak's clients against the newer
// surfaces (hostile_surfaces.go, hostile_hook.go), started with the same
// code, against the first gateway while the run's own clients go on:
//
//   - SSE non-readers on "#", never read after the header, held 15 s;
//   - forged Last-Event-IDs (too long, too many positions, a foreign
//     pattern), each to be refused 400 before the stream starts;
//   - presence churn beside slow presence members: the churners must meet
//     rate_limited, the members must stay connected and get a resync (a
//     member the write timeout drops while this process is starved of
//     CPU is counted, not a violation: presenceMember);
//   - a group-name spray of HTTP pull polls, refused
//     too_many_subscriptions past the pull members of one client;
//   - a never-acking session joining many groups, refused
//     too_many_subscriptions past its session leases, never closed;
//   - a connect storm from one address against a slow connect hook,
//     refused past that address's share of the hook without calling it,
//     while another address still connects.
//
// Invariant 6 of torture.go: every one of them met its bound, and none saw
// a promise broken (hostile.problems). The run's own subscribers beside
// them are held to invariants 1 and 2 as always: the attacks must not cost
// them a record or a stall.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchyard/switchyard/router"
)

// tortureHook starts the connect hook of the attacks' connect storm and
// returns the router's hook options for the first gateway; nil without
// attacks.
func tortureHook(cfg *tortureConfig) (*router.HookOptions, error) {
	if cfg.without["attacks"] {
		return nil, nil
	}
	hook, err := startConnectHook()
	if err != nil {
		return nil, fmt.Errorf("torture gateway: connect hook: %w", err)
	}
	hostileHook.Store(hook)
	return &router.HookOptions{URL: hook.url, Connect: true, MaxConcurrent: 4 * stormHookShare, MaxConcurrentPerIP: stormHookShare}, nil
}

// attacks runs the hostile clients until stop, and returns once they all
// left.
func (tr *torture) attacks(ctx context.Context, _ *rand.Rand, stop <-chan struct{}) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr.hostile.startSurfaces(tr.hostile.looper(actx))
	select {
	case <-stop:
	case <-ctx.Done():
	}
	cancel()
	tr.hostile.wait()
	tr.hostile.httpc.CloseIdleConnections()
}

// attackVerdict is invariant 6's verdict: the problems the attacks saw,
// and a line of what they met.
func (tr *torture) attackVerdict() (problems []string, figures string) {
	h := tr.hostile
	t := &h.tally
	problems = h.problems(true)
	figures = fmt.Sprintf("SSE non-reader streams %d, forged ids refused %d, presence churn rate-limited %d, resyncs to slow members %d (slow members dropped while the process was starved %d), spray polls refused %d, lease subscribes refused %d, storm connects %d (refused %d, 503 %d), other address connects %d (slowest %v)",
		t.sseOpened.Load(), t.forgedRefused.Load(), t.presenceLimited.Load(), t.presenceResyncs.Load(), t.presenceStarvedEnds.Load(), t.pullRefused.Load(),
		t.leaseRefused.Load(), t.stormAttempts.Load(), t.stormRefused.Load(), t.stormUnavailable.Load(), t.probeConnects.Load(),
		time.Duration(t.probeMaxMS.Load())*time.Millisecond)
	return problems, figures
}
