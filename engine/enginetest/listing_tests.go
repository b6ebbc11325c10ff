package enginetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// Paged listings: TopicsPage in name order, by cursor.

// pageOwn pages through the test's own topics (named env.base + "."),
// limit at a time, calling between(after) before each page after the
// first; it fails on a page over limit, on an empty page that says more
// follow, and on more pages than the topics could fill. A shared engine's
// other topics sort outside the test's prefix, so paging stops there.
func (env *env) pageOwn(limit, maxTopics int, between func(after string)) []engine.TopicInfo {
	env.t.Helper()
	prefix := env.base + "."
	after := prefix
	var out []engine.TopicInfo
	for pages := 0; ; pages++ {
		if pages > maxTopics+1 {
			env.t.Fatalf("limit %d: more than %d pages", limit, maxTopics+1)
		}
		if pages > 0 && between != nil {
			between(after)
		}
		page, more, err := env.e.TopicsPage(ctx(), after, limit)
		if err != nil {
			env.t.Fatalf("TopicsPage(%q, %d): %v", after, limit, err)
		}
		if len(page) > max(limit, 1) {
			env.t.Fatalf("TopicsPage(%q, %d) returned %d topics", after, limit, len(page))
		}
		if more && len(page) == 0 {
			env.t.Fatalf("TopicsPage(%q, %d): an empty page with more to follow", after, limit)
		}
		for _, ti := range page {
			if !strings.HasPrefix(ti.Config.Name, prefix) {
				return out
			}
			out = append(out, ti)
		}
		if !more {
			return out
		}
		after = page[len(page)-1].Config.Name
	}
}

func names(ts []engine.TopicInfo) []string {
	out := make([]string, len(ts))
	for i, ti := range ts {
		out[i] = ti.Config.Name
	}
	return out
}

// testTopicsPaged: whatever the page size, paging through the topics lists
// each once, in name order, with its configuration and partitions, and no
// page is larger than asked (a limit below 1 is 1), also right after a
// full listing.
func testTopicsPaged(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	const n = 37
	want := make([]string, n)
	for i := range n {
		want[i] = env.topic(fmt.Sprintf("t%03d", i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := slices.Clone(want)
	rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i, name := range order {
		env.create(engine.TopicConfig{Name: name, Partitions: 1 + i%3})
	}
	env.append(engine.Message{Topic: want[5], Data: []byte("x")})

	// Each page size twice: the second time just after a full Topics, which
	// an engine may keep and page from.
	for _, tt := range []struct {
		limit      int
		afterTopic bool
	}{{0, false}, {1, false}, {2, false}, {5, false}, {36, false}, {37, false}, {38, false}, {1000, false},
		{1, true}, {5, true}, {37, true}, {1000, true}} {
		limit := tt.limit
		t.Run(fmt.Sprintf("limit_%d_after_Topics_%v", limit, tt.afterTopic), func(t *testing.T) {
			if tt.afterTopic {
				if _, err := env.e.Topics(ctx()); err != nil {
					t.Fatal(err)
				}
			}
			got := env.pageOwn(limit, n, nil)
			if !slices.Equal(names(got), want) {
				t.Fatalf("paged topics = %v, want %v", names(got), want)
			}
			for _, ti := range got {
				one := env.info(ti.Config.Name)
				if ti.Config != one.Config || len(ti.Parts) != len(one.Parts) {
					t.Fatalf("page lists %+v, Topic says %+v", ti, one)
				}
			}
			if p := got[5].Parts; sumNext(p) != 1 {
				t.Errorf("page lists %s with partitions %+v, want one record", want[5], p)
			}
		})
	}
}

func sumNext(ps []engine.PartitionInfo) int64 {
	var n int64
	for _, p := range ps {
		n += p.Next
	}
	return n
}

// testTopicsPagedUnderChurn: topics created and deleted between pages do
// not break paging: every topic that exists throughout is listed once, in
// order; one deleted before its page is not listed; one created after the
// cursor before its page is listed, one created behind the cursor is not.
func testTopicsPagedUnderChurn(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	const n = 40
	name := func(i int) string { return env.topic(fmt.Sprintf("t%03d", i)) }
	for i := 0; i < n; i += 2 { // even numbers now; odd ones appear during paging
		env.create(engine.TopicConfig{Name: name(i)})
	}
	stable := map[string]bool{}
	for i := 0; i < n; i += 2 {
		stable[name(i)] = true
	}
	deleted := map[string]bool{}
	late := map[string]bool{}   // created ahead of the cursor: must be listed
	behind := map[string]bool{} // created behind the cursor: must not be
	step, lo, hi := 0, 1, n-1
	got := env.pageOwn(3, 2*n, func(after string) {
		step++
		// Delete an even topic ahead of the cursor.
		if d := name(n - 2*step); d > after && stable[d] {
			if err := env.e.DeleteTopic(ctx(), d); err != nil {
				t.Fatalf("DeleteTopic(%s): %v", d, err)
			}
			delete(stable, d)
			deleted[d] = true
		}
		// Create the lowest and the highest odd topic not created yet:
		// the lowest soon falls behind the cursor, the highest is ahead.
		for _, i := range []int{lo, hi} {
			if lo > hi {
				break
			}
			c := name(i)
			env.create(engine.TopicConfig{Name: c})
			if c > after {
				late[c] = true
			} else {
				behind[c] = true
			}
			if i == lo {
				lo += 2
			} else {
				hi -= 2
			}
		}
	})
	listed := names(got)
	checkPaged(t, "topics", listed, stable, late, deleted)
	for name := range behind {
		if slices.Contains(listed, name) {
			t.Errorf("%s was created behind the cursor but listed: %v", name, listed)
		}
	}
	if len(deleted) == 0 || len(late) == 0 || len(behind) == 0 {
		t.Fatalf("churn did not happen: %d deleted, %d created ahead, %d behind", len(deleted), len(late), len(behind))
	}
}

// checkPaged checks the names a paged listing of what (topics, groups)
// returned while they changed: in strict name order, with every stable
// name and every one created ahead of the cursor (late), and none deleted
// before its page.
func checkPaged(t *testing.T, what string, listed []string, stable, late, deleted map[string]bool) {
	t.Helper()
	if !slices.IsSorted(listed) || len(slices.Compact(slices.Clone(listed))) != len(listed) {
		t.Fatalf("paged %s not in strict name order: %v", what, listed)
	}
	for name := range stable {
		if !slices.Contains(listed, name) {
			t.Errorf("%s existed throughout but was not listed: %v", name, listed)
		}
	}
	for name := range late {
		if !slices.Contains(listed, name) {
			t.Errorf("%s was created ahead of the cursor but not listed: %v", name, listed)
		}
	}
	for name := range deleted {
		if slices.Contains(listed, name) {
			t.Errorf("%s was deleted before its page but listed: %v", name, listed)
		}
	}
}

// pageOwnGroups pages through the test's own groups (named env.base +
// "-"), limit at a time, calling between(after) before each page after the
// first, with the checks of pageOwn.
func (env *env) pageOwnGroups(limit, maxGroups int, between func(after string)) []string {
	env.t.Helper()
	prefix := env.base + "-"
	after := prefix
	var out []string
	for pages := 0; ; pages++ {
		if pages > maxGroups+1 {
			env.t.Fatalf("limit %d: more than %d pages", limit, maxGroups+1)
		}
		if pages > 0 && between != nil {
			between(after)
		}
		page, more, err := env.e.GroupsPage(ctx(), after, limit)
		if err != nil {
			env.t.Fatalf("GroupsPage(%q, %d): %v", after, limit, err)
		}
		if len(page) > max(limit, 1) || (more && len(page) == 0) {
			env.t.Fatalf("GroupsPage(%q, %d) returned %d groups, more %v", after, limit, len(page), more)
		}
		for _, g := range page {
			if !strings.HasPrefix(g.Name, prefix) {
				return out
			}
			out = append(out, g.Name)
		}
		if !more {
			return out
		}
		after = page[len(page)-1].Name
	}
}

// testGroupsPaged: paging through the groups lists each once, in name
// order, whatever the page size; under churn between pages, groups that
// exist throughout are listed once, a group deleted before its page is
// not, and one created ahead of the cursor is.
func testGroupsPaged(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("t")
	env.create(engine.TopicConfig{Name: topic})
	sk := newSink()
	const n = 13
	want := make([]string, n)
	for i := range n {
		want[i] = env.group(fmt.Sprintf("g%02d", 2*i))
	}
	for _, i := range rand.New(rand.NewPCG(3, 4)).Perm(n) {
		env.join(engine.JoinRequest{Group: want[i], Pattern: topic, Member: "m"}, sk.consumer(want[i]+"/m"))
	}
	for _, limit := range []int{0, 1, 3, 12, 13, 100} {
		t.Run(fmt.Sprintf("limit_%d", limit), func(t *testing.T) {
			if got := env.pageOwnGroups(limit, n, nil); !slices.Equal(got, want) {
				t.Fatalf("paged groups = %v, want %v", got, want)
			}
		})
	}

	t.Run("churn", func(t *testing.T) {
		stable := map[string]bool{}
		for _, g := range want {
			stable[g] = true
		}
		deleted, late := map[string]bool{}, map[string]bool{}
		step := 0
		got := env.pageOwnGroups(2, 2*n, func(after string) {
			step++
			if d := want[n-step]; d > after && stable[d] {
				if err := env.e.DeleteGroup(ctx(), d); err != nil {
					t.Fatalf("DeleteGroup(%s): %v", d, err)
				}
				delete(stable, d)
				deleted[d] = true
			}
			if c := env.group(fmt.Sprintf("g%02d", 2*(n-step)+1)); c > after {
				env.join(engine.JoinRequest{Group: c, Pattern: topic, Member: "m"}, sk.consumer(c+"/m"))
				late[c] = true
			}
		})
		checkPaged(t, "groups", got, stable, late, deleted)
		if len(deleted) == 0 || len(late) == 0 {
			t.Fatalf("churn did not happen: %d deleted, %d created", len(deleted), len(late))
		}
	})
}
