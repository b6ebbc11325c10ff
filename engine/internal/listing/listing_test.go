package listing_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine/internal/listing"
)

// TestPageIsTheNextNamesInOrder: whatever order the names are offered in,
// a page holds the limit smallest names after the cursor, in order, and
// says whether more follow; following the pages lists every name once.
func TestPageIsTheNextNamesInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 1001} {
		for _, limit := range []int{1, 2, 10, 100, 5000} {
			t.Run(fmt.Sprintf("names_%d_limit_%d", n, limit), func(t *testing.T) {
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("t%05d", i)
				}
				rng := rand.New(rand.NewPCG(uint64(n), uint64(limit)))
				var got []string
				after := ""
				for pages := 0; pages <= n/limit+1; pages++ {
					rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
					p := listing.New[string](after, limit)
					for _, name := range names {
						p.Add(name, name)
					}
					page, more := p.Sorted()
					if len(page) > limit {
						t.Fatalf("page of %d names, limit %d", len(page), limit)
					}
					got = append(got, page...)
					if !more {
						break
					}
					after = page[len(page)-1]
				}
				want := slices.Clone(names)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("paged %d names, want %d in order: %v", len(got), len(want), got)
				}
			})
		}
	}
}

// TestPageLimitClamped: a limit below 1 is 1 and one above MaxLimit is
// MaxLimit.
func TestPageLimitClamped(t *testing.T) {
	for _, tt := range []struct{ limit, want int }{{0, 1}, {-5, 1}, {listing.MaxLimit + 1, listing.MaxLimit}} {
		p := listing.New[int]("", tt.limit)
		for i := range listing.MaxLimit + 10 {
			p.Add(fmt.Sprintf("n%06d", i), i)
		}
		if page, more := p.Sorted(); len(page) != tt.want || !more {
			t.Errorf("limit %d: %d items (more %v), want %d and more", tt.limit, len(page), more, tt.want)
		}
	}
}
