package router

// The topic a persistent session's position is of (mqtt_session_track.go).
// A topic deleted and made again under its name starts over at offset 0,
// so an offset of the old topic applied to the new one would skip its
// first records. Each stored position carries the creation time of its
// topic (engine.MQTTPosition.Created), which tells the two apart: a resume
// whose topic was made at another time reads that partition from its
// first offset, counting what retention trimmed as a gap, as for a topic
// made while the client was away (resumeFrom). A position stored without
// one (an older record) is applied as it is.
//
// The session learns the creation times from the topics its resume lists
// (resumeFrom) and, for a topic it first got live, with one look-up per
// save of the topics it does not know (topicsMade): none per delivery. A
// topic's deletion drops its creation time and its positions
// (trackTopicDeleted), so that positions of a topic made again are the new
// topic's alone.
//
// Concurrency: mqttTrack.made and .dels are under mqttSession.imu, like
// the rest of mqttTrack.

import (
	"context"
	"time"
)

// madeLookups is how many unknown topics a save looks up one by one;
// past it, it lists the topics once.
const madeLookups = 8

// noteMade records that topic, made at created, is the one the session's
// positions of it are of, unless a topic was deleted since dels was read
// (the creation time may be the deleted topic's).
func (s *mqttSession) noteMade(topic string, created time.Time, dels uint64) {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.trk.dels != dels {
		return
	}
	if s.trk.made == nil {
		s.trk.made = map[string]time.Time{}
	}
	s.trk.made[topic] = created
}

// topicDels reads the count of topic deletions the session has seen.
func (s *mqttSession) topicDels() uint64 {
	s.imu.Lock()
	defer s.imu.Unlock()
	return s.trk.dels
}

// topicsMade returns the creation time of each topic the session holds
// positions of, looking up those it does not know (a topic gone has none:
// its positions are stored without). The creation times of topics it no
// longer holds positions of are let go.
func (s *mqttSession) topicsMade() map[string]time.Time {
	s.imu.Lock()
	held := map[string]time.Time{}
	var unknown []string
	note := func(topic string) {
		if _, ok := held[topic]; ok {
			return
		}
		c, ok := s.trk.made[topic]
		held[topic] = c
		if !ok {
			unknown = append(unknown, topic)
		}
	}
	for k := range s.trk.next {
		note(k.topic)
	}
	for _, p := range s.trk.sent {
		note(p.key.topic)
	}
	for t := range s.trk.made {
		if _, ok := held[t]; !ok {
			delete(s.trk.made, t)
		}
	}
	dels := s.trk.dels
	s.imu.Unlock()
	if len(unknown) == 0 {
		return held
	}
	found := s.lookupMade(unknown)
	for t, c := range found {
		held[t] = c
		s.noteMade(t, c, dels)
	}
	if s.topicDels() != dels {
		// A topic was deleted meanwhile: what was looked up may be of it
		// or of one made again; stored without, as before.
		for t := range found {
			held[t] = time.Time{}
		}
	}
	return held
}

// lookupMade returns the creation times of topics, those the engine
// knows.
func (s *mqttSession) lookupMade(topics []string) map[string]time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	out := make(map[string]time.Time, len(topics))
	if len(topics) <= madeLookups {
		for _, name := range topics {
			if t, err := s.rt.eng.Topic(ctx, name); err == nil {
				out[name] = t.Created
			}
		}
		return out
	}
	ts, err := s.rt.eng.Topics(ctx)
	if err != nil {
		return out
	}
	want := make(map[string]bool, len(topics))
	for _, t := range topics {
		want[t] = true
	}
	for _, t := range ts {
		if want[t.Config.Name] {
			out[t.Config.Name] = t.Created
		}
	}
	return out
}

// trackTopicDeleted drops the creation time and the positions of a
// deleted topic: a topic made again under its name starts over.
func (s *mqttSession) trackTopicDeleted(topic string) {
	if s.trk == nil {
		return
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	s.trk.dels++
	delete(s.trk.made, topic)
	for k := range s.trk.next {
		if k.topic == topic {
			delete(s.trk.next, k)
		}
	}
	for id, p := range s.trk.sent {
		if p.key.topic == topic {
			delete(s.trk.sent, id)
		}
	}
}
