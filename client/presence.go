package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/switchyard/switchyard/internal/wire"
)

// Presence: a plain subscription to a topic with SubscribeOptions.Presence
// makes this session present on the topic; the gateway then reports other
// sessions that join or leave it to Options.OnPresence, and Client.Presence
// lists who is there. A client that reads the announcements too slowly
// may have some dropped by the gateway, which then sends a resync frame:
// the client lists the topic again and hands the list to OnPresence as a
// PresenceEvent with Resync set.

// Member is a session present on a topic.
type Member struct {
	Session string          `json:"session"`
	User    string          `json:"user"`
	Info    json.RawMessage `json:"info,omitempty"`
}

// PresenceEvent is a join or a leave on a topic, or a resync.
type PresenceEvent struct {
	Joined bool // false: a leave, or a resync
	Topic  string
	Member Member
	// Resync: the gateway dropped announcements to this client (it read
	// them too slowly), so the client listed the topic again: List is
	// who is present, to replace what earlier events built; the events
	// after it apply to it. Joined and Member are zero.
	Resync bool
	List   PresenceList
}

// PresenceList is who is present on a topic. Count includes members the
// gateway counts but does not list (past its per-topic bound).
type PresenceList struct {
	Topic   string   `json:"topic"`
	Count   int      `json:"count"`
	Members []Member `json:"members"`
}

type presenceReq struct {
	Op    string `json:"op"`
	ID    uint64 `json:"id"`
	Topic string `json:"topic"`
}

// Presence asks the gateway who is present on topic. Errors from the
// gateway are *Error ("forbidden" without a subscribe grant for it).
func (c *Client) Presence(ctx context.Context, topic string) (PresenceList, error) {
	f, err := c.roundTrip(ctx, func(id uint64) any { return presenceReq{Op: wire.OpPresence, ID: id, Topic: topic} }, nil, nil)
	if err != nil {
		return PresenceList{}, err
	}
	return presenceList(f), nil
}

func presenceList(f *inFrame) PresenceList {
	return PresenceList{Topic: f.Topic, Count: f.Count, Members: f.Members}
}

// onPresence queues a join or leave frame for Options.OnPresence.
func (c *Client) onPresence(f *inFrame) {
	if c.opts.OnPresence == nil {
		return
	}
	c.disp.push(event{kind: evPresence, presence: &PresenceEvent{
		Joined: f.Op == "join", Topic: f.Topic,
		Member: Member{Session: f.Session, User: f.User, Info: f.Info},
	}})
}

// onPresenceResync lists topic again after the gateway dropped
// announcements, and queues the list for Options.OnPresence in order with
// the events: the gateway sends the announcements made while it lists
// after the reply, and the reply is queued on the reader goroutine.
func (c *Client) onPresenceResync(topic string) {
	if c.opts.OnPresence == nil {
		return
	}
	c.wg.Add(1) // the reader's own count is held, so Close's Wait has not returned
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
		defer cancel()
		_, err := c.roundTrip(ctx, func(id uint64) any { return presenceReq{Op: wire.OpPresence, ID: id, Topic: topic} }, nil,
			func(f *inFrame) {
				c.disp.push(event{kind: evPresence, presence: &PresenceEvent{Topic: topic, Resync: true, List: presenceList(f)}})
			})
		if err != nil && c.ctx.Err() == nil {
			c.disp.push(event{kind: evError, err: fmt.Errorf("client: listing %s after a presence resync: %w", topic, err)})
		}
	}()
}
