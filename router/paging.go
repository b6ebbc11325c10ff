package router

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Paged listings.
//
// GET /v1/topics, /v1/groups and /v1/deadletters return one page: at most
// `limit` items (default DefaultPageLimit, at most MaxPageLimit) and at most
// about MaxPageBytes of JSON (always at least one item). When more follow,
// the reply carries "next_cursor", an opaque string to pass back as
// `cursor` for the next page. The item key ("topics", "groups",
// "deadletters") is unchanged, so a client that knows nothing of paging
// reads the first page as it read the whole list.
//
// Topics and groups are in name order and the cursor is the last name
// returned: items created or deleted between pages are seen or not
// according to their name, and none is returned twice. Dead letters are
// oldest first and the cursor is the last letter returned; if it was
// redriven meanwhile, the next page starts after its time.
//
// The engine builds only the page of topics or groups
// (engine.Engine.TopicsPage and GroupsPage, asked a chunk at a time by
// fillPage so the byte bound leaves few built items out), and a page is encoded whole before it is written, so a listing request
// holds at most about one page at any moment, and a reader that stops
// reading holds it only until the server's write timeout closes the
// connection.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	MaxPageBytes     = 1 << 20
)

// pageRequest is a listing request's limit and cursor.
type pageRequest struct {
	limit int
	after string // the decoded cursor; "" for the first page
}

func parsePage(c echo.Context) (pageRequest, error) {
	p := pageRequest{limit: DefaultPageLimit}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxPageLimit {
			return p, perr(codeBadRequest, "limit must be 1 to %d", MaxPageLimit)
		}
		if n > 0 { // 0, which used to mean "all", is the default page
			p.limit = n
		}
	}
	if s := c.QueryParam("cursor"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			return p, perr(codeBadRequest, "cursor is not one this gateway returned")
		}
		p.after = string(b)
	}
	return p, nil
}

func encodeCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// pageWriter encodes a page's items under the page's count and byte bounds.
type pageWriter struct {
	buf   bytes.Buffer
	n     int
	limit int
	last  string // key of the last item written
	full  bool
}

func newPageWriter(key string, limit int) *pageWriter {
	w := &pageWriter{limit: limit}
	w.buf.WriteString(`{"`)
	w.buf.WriteString(key)
	w.buf.WriteString(`":[`)
	return w
}

// add encodes v as the next item, keyed by key for the cursor. It reports
// false, writing nothing, when the page is full: the caller stops and the
// page gets a next_cursor.
func (w *pageWriter) add(key string, v any) (bool, error) {
	if w.n >= w.limit {
		w.full = true
		return false, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	if w.n > 0 && w.buf.Len()+len(data) > MaxPageBytes {
		w.full = true
		return false, nil
	}
	if w.n > 0 {
		w.buf.WriteByte(',')
	}
	w.buf.Write(data)
	w.n++
	w.last = key
	return true, nil
}

// send writes the page, with next_cursor when an item was left out.
func (w *pageWriter) send(c echo.Context) error {
	w.buf.WriteByte(']')
	if w.full && w.n > 0 {
		w.buf.WriteString(`,"next_cursor":`)
		cur, _ := json.Marshal(encodeCursor(w.last))
		w.buf.Write(cur)
	}
	w.buf.WriteString("}\n")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, w.buf.Bytes())
}

// firstChunk is how many items fillPage asks the engine for first; later
// requests are sized by the bytes the page has left and the items' size so
// far, so that items the byte bound leaves out are few.
const firstChunk = 8

// fillPage fills w with items fetched from the engine in name order after
// after, a chunk at a time: at most the page's limit, and no more than the
// page's remaining bytes suggest, so a request never builds much more than
// the page it sends (a topic of 1,024 partitions is 100 KiB of JSON).
// name is an item's cursor key, view its JSON form.
func fillPage[T any](w *pageWriter, after string, fetch func(after string, limit int) ([]T, bool, error),
	name func(T) string, view func(T) any) error {
	for w.n < w.limit {
		n := w.limit - w.n
		if w.n == 0 {
			n = min(n, firstChunk)
		} else if perItem := w.buf.Len() / w.n; perItem > 0 {
			n = min(n, (MaxPageBytes-w.buf.Len())/perItem+1)
		}
		items, more, err := fetch(after, max(n, 1))
		if err != nil {
			return err
		}
		for _, it := range items {
			ok, err := w.add(name(it), view(it))
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
		}
		if !more {
			return nil
		}
		if len(items) == 0 { // not an engine's answer; end the page with a cursor
			break
		}
		after = name(items[len(items)-1])
	}
	w.full = true
	return nil
}

// startAfter returns the index of the first of n name-sorted items whose
// name is after the cursor.
func startAfter(n int, name func(int) string, after string) int {
	if after == "" {
		return 0
	}
	return sort.Search(n, func(i int) bool { return name(i) > after })
}

// deadLetterCursor is the cursor key of a dead letter: its time and ID.
func deadLetterCursor(t time.Time, id string) string {
	return strconv.FormatInt(t.UnixNano(), 10) + ":" + id
}

// startAfterDeadLetter returns where the page after the cursor's letter
// starts among n letters, oldest first.
func startAfterDeadLetter(n int, id func(int) string, at func(int) time.Time, after string) int {
	if after == "" {
		return 0
	}
	ts, lastID, ok := strings.Cut(after, ":")
	nanos, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return 0
	}
	for i := 0; i < n; i++ {
		if id(i) == lastID {
			return i + 1
		}
	}
	t := time.Unix(0, nanos)
	for i := 0; i < n; i++ {
		if at(i).After(t) {
			return i
		}
	}
	return n
}
