package router

import (
	"encoding/json"
	"sort"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// System topic summaries.
//
// $sys.topics and $sys.groups carry summaries, not listings: counts and
// totals, the busiest few (topics by publish rate since the previous
// summary, groups by lag), and the names created and deleted since the
// previous summary, each list capped. With names bounded by the topic
// rules (255 bytes), a record stays under maxSysRecordBytes however many
// topics and groups exist; sysRecordFit enforces it by shortening the lists
// if it ever would not. The full picture is in the paged HTTP listings.
const (
	// sysTopN caps the busiest topics and groups in a summary.
	sysTopN = 10
	// sysChangedN caps the created and deleted names in a summary; the
	// counts stay exact.
	sysChangedN = 20
	// maxSysRecordBytes bounds one $sys.topics or $sys.groups record.
	maxSysRecordBytes = 16 << 10
	// sysRetainBytes bounds what each summary topic retains; with the
	// record bound it gives the record count kept (256, over 20 minutes
	// at one summary per 5 s).
	sysRetainBytes = 4 << 20
	// sysSummaryRecords is the retention, in records, of $sys.topics and
	// $sys.groups; $sys.stats records are small and bounded alike.
	sysSummaryRecords = sysRetainBytes / maxSysRecordBytes
)

// topicsSummary is a $sys.topics record.
type topicsSummary struct {
	Time       string       `json:"time"`
	Count      int          `json:"count"` // topics, $ topics included
	Partitions int          `json:"partitions"`
	Records    int64        `json:"records"` // retained, all partitions
	Bytes      int64        `json:"bytes"`
	Top        []topicBrief `json:"top"`
	nameChanges
}

// nameChanges are the names a summary's list gained and lost since the
// previous summary (at most sysChangedN of each) and how many of each.
type nameChanges struct {
	Created      []string `json:"created"`
	Deleted      []string `json:"deleted"`
	CreatedCount int      `json:"created_count"`
	DeletedCount int      `json:"deleted_count"`
}

// shrink halves the changed names and reports whether it cut any.
func (c *nameChanges) shrink() bool { return halve(&c.Created, &c.Deleted) }

type topicBrief struct {
	Topic      string  `json:"topic"`
	Rate       float64 `json:"publishes_per_s"`
	Partitions int     `json:"partitions"`
	Records    int64   `json:"records"`
	Bytes      int64   `json:"bytes"`
}

// groupsSummary is a $sys.groups record.
type groupsSummary struct {
	Time    string       `json:"time"`
	Count   int          `json:"count"`
	Members int          `json:"members"`
	Lag     int64        `json:"lag"`
	Top     []groupBrief `json:"top"`
	nameChanges
}

type groupBrief struct {
	Group      string `json:"group"`
	Pattern    string `json:"pattern"`
	Members    int    `json:"members"`
	Partitions int    `json:"partitions"`
	Lag        int64  `json:"lag"`
}

// sysState is what the summaries compare against: the names and publish
// counts of the previous summary. Only the background goroutine uses it.
type sysState struct {
	at          time.Time
	topicNames  map[string]struct{}
	groupNames  map[string]struct{}
	topicCounts map[string]int64
}

// changes returns the names in cur not in prev (created) and in prev not
// in cur (deleted), each sorted and capped, with the exact counts, and
// replaces prev's contents with cur.
func changes(prev map[string]struct{}, cur []string) nameChanges {
	var created, deleted []string
	var nc, nd int
	now := make(map[string]struct{}, len(cur))
	for _, n := range cur {
		now[n] = struct{}{}
		if _, ok := prev[n]; !ok {
			nc++
			if len(created) < sysChangedN {
				created = append(created, n)
			}
		}
	}
	for n := range prev {
		if _, ok := now[n]; !ok {
			nd++
			deleted = append(deleted, n)
		}
	}
	sort.Strings(created)
	sort.Strings(deleted)
	if len(deleted) > sysChangedN {
		deleted = deleted[:sysChangedN]
	}
	clear(prev)
	for n := range now {
		prev[n] = struct{}{}
	}
	return nameChanges{Created: orEmpty(created), Deleted: orEmpty(deleted), CreatedCount: nc, DeletedCount: nd}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// topicsSummaryOf builds the $sys.topics record for ts (name order) at now.
func (rt *Router) topicsSummaryOf(st *sysState, ts []engine.TopicInfo, now time.Time) topicsSummary {
	secs := now.Sub(st.at).Seconds()
	if secs <= 0 {
		secs = 1
	}
	out := topicsSummary{Time: now.UTC().Format(timeFormat), Count: len(ts)}
	names := make([]string, 0, len(ts))
	var top []topicBrief
	for _, t := range ts {
		names = append(names, t.Config.Name)
		var recs, bytes int64
		for _, p := range t.Parts {
			recs += max(0, p.Next-p.Earliest)
			bytes += p.Bytes
		}
		out.Partitions += len(t.Parts)
		out.Records += recs
		out.Bytes += bytes
		if v, ok := rt.stats.topics.Load(t.Config.Name); ok {
			n := v.(*atomic.Int64).Load()
			d := n - st.topicCounts[t.Config.Name]
			st.topicCounts[t.Config.Name] = n
			if d > 0 {
				top = append(top, topicBrief{Topic: t.Config.Name, Rate: float64(d) / secs,
					Partitions: len(t.Parts), Records: recs, Bytes: bytes})
			}
		}
	}
	for n := range st.topicCounts {
		if _, ok := rt.stats.topics.Load(n); !ok {
			delete(st.topicCounts, n)
		}
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Rate != top[j].Rate {
			return top[i].Rate > top[j].Rate
		}
		return top[i].Topic < top[j].Topic
	})
	if len(top) > sysTopN {
		top = top[:sysTopN]
	}
	if top == nil {
		top = []topicBrief{}
	}
	out.Top = top
	out.nameChanges = changes(st.topicNames, names)
	return out
}

// groupsSummaryOf builds the $sys.groups record for gs at now.
func groupsSummaryOf(st *sysState, gs []engine.GroupInfo, now time.Time) groupsSummary {
	out := groupsSummary{Time: now.UTC().Format(timeFormat), Count: len(gs)}
	names := make([]string, 0, len(gs))
	top := make([]groupBrief, 0, len(gs))
	for _, g := range gs {
		names = append(names, g.Name)
		b := groupBrief{Group: g.Name, Pattern: g.Pattern, Members: len(g.Members), Partitions: len(g.Partitions)}
		for _, p := range g.Partitions {
			b.Lag += p.Lag
		}
		out.Members += b.Members
		out.Lag += b.Lag
		top = append(top, b)
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Lag != top[j].Lag {
			return top[i].Lag > top[j].Lag
		}
		return top[i].Group < top[j].Group
	})
	if len(top) > sysTopN {
		top = top[:sysTopN]
	}
	out.Top = top
	out.nameChanges = changes(st.groupNames, names)
	return out
}

// sysRecordFit encodes a summary, calling shrink (which halves its lists,
// changed names first, then the busiest) until the record is under
// maxSysRecordBytes or shrink has nothing left to cut; the counts keep the
// truth. With the name limits it never needs to; it guards the bound.
func sysRecordFit(v any, shrink func() bool) ([]byte, error) {
	for {
		data, err := json.Marshal(v)
		if err != nil || len(data) <= maxSysRecordBytes || !shrink() {
			return data, err
		}
	}
}

// halve cuts the first non-empty list in half and reports whether it cut.
func halve[T any](lists ...*[]T) bool {
	for _, l := range lists {
		if len(*l) > 0 {
			*l = (*l)[:len(*l)/2]
			return true
		}
	}
	return false
}

func (s *topicsSummary) shrink() bool { return s.nameChanges.shrink() || halve(&s.Top) }

func (s *groupsSummary) shrink() bool { return s.nameChanges.shrink() || halve(&s.Top) }
