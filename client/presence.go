package client

import (
	"context"
	"encoding/json"
)

// Presence: a plain subscription to a topic with SubscribeOptions.Presence
// makes this session present on the topic; the gateway then reports other
// sessions that join or leave it to Options.OnPresence, and Client.Presence
// lists who is there.

// Member is a session present on a topic.
type Member struct {
	Session string          `json:"session"`
	User    string          `json:"user"`
	Info    json.RawMessage `json:"info,omitempty"`
}

// PresenceEvent is a join or a leave on a topic.
type PresenceEvent struct {
	Joined bool // false: a leave
	Topic  string
	Member Member
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
	f, err := c.roundTrip(ctx, func(id uint64) any { return presenceReq{Op: "presence", ID: id, Topic: topic} }, nil, nil)
	if err != nil {
		return PresenceList{}, err
	}
	return PresenceList{Topic: f.Topic, Count: f.Count, Members: f.Members}, nil
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
