package jsengine_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestDeleteGroupRetriedAfterUnansweredListing: a DeleteGroup whose
// listing of the group's positions is not answered fails unavailable
// within one round trip's bound, telling its caller to try again, and
// the retry, once the link is back, removes the group's positions: none
// stays in the bucket for a group made again under the name to take up
// (the first call used to remove the definition before the listing, so
// the retry answered that the group was unknown and removed nothing).
func TestDeleteGroupRetriedAfterUnansweredListing(t *testing.T) {
	s := newGroupListingStall(t)
	e, px, url, prefix := s.e, s.px, s.url, s.prefix
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, group = "kept", "leavers"
	s.groupWithPositions(t, ctx, topic, group)
	groups := openBucket(t, url, prefix+"_groups")
	positions := func() []string {
		t.Helper()
		l, err := groups.ListKeysFiltered(ctx, "c."+base64.RawURLEncoding.EncodeToString([]byte(group))+".>")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range l.Keys() {
			keys = append(keys, k)
		}
		return keys
	}
	if len(positions()) == 0 {
		t.Fatal("the group has no positions to delete")
	}

	s.armed.Store(true)
	dctx, dcancel := context.WithTimeout(ctx, silentCallerWait)
	err := e.DeleteGroup(dctx, group)
	dcancel()
	<-s.stalled
	t.Logf("DeleteGroup over a silent link: %v", err)
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("DeleteGroup over a silent link: %v, want unavailable", err)
	}
	px.Resume()
	err = e.DeleteGroup(ctx, group)
	t.Logf("DeleteGroup again once the link is back: %v", err)
	if err != nil && !errors.Is(err, engine.ErrUnknownGroup) {
		t.Fatalf("DeleteGroup again: %v", err)
	}
	if left := positions(); len(left) > 0 {
		t.Errorf("after a DeleteGroup answered unavailable and tried again (%v), the group's positions are still in the bucket: %v", err, left)
	}
}
