package router

import (
	"testing"
)

// TestMergeSessionPages: the merged page keeps (node, id) order, holds at
// most limit entries, and stops at the last entry of a node that had more,
// so that none of that node's sessions is skipped by the next page.
func TestMergeSessionPages(t *testing.T) {
	views := func(node string, ids ...string) []sessionView {
		var out []sessionView
		for _, id := range ids {
			out = append(out, sessionView{ID: id, Node: node})
		}
		return out
	}
	keys := func(p sessionsPage) string {
		s := ""
		for _, v := range p.Sessions {
			s += v.Node + "/" + v.ID + " "
		}
		return s + "cursor=" + p.NextCursor
	}
	for _, tc := range []struct {
		name    string
		answers []nodeAns
		limit   int
		want    string
	}{
		{"all fit", []nodeAns{{Sessions: views("b", "1", "2")}, {Sessions: views("a", "3")}}, 5,
			"a/3 b/1 b/2 cursor="},
		{"limit", []nodeAns{{Sessions: views("b", "1", "2")}, {Sessions: views("a", "3")}}, 2,
			"a/3 b/1 cursor=" + encodeCursor("b 1")},
		{"a node with more stops the page", []nodeAns{{Sessions: views("a", "1"), More: true}, {Sessions: views("b", "2")}}, 5,
			"a/1 cursor=" + encodeCursor("a 1")},
		{"empty", []nodeAns{{}, {}}, 5, "cursor="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(mergePage(tc.answers, tc.limit)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
