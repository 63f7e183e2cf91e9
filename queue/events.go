package queue

import (
	"context"
	"fmt"

	"github.com/bigtables/bigtables/protocol"
	"github.com/redis/go-redis/v9"
)

// DefaultEventsList is the Redis list the notifier appends events to.
const DefaultEventsList = protocol.DefaultEventsList

// ValidateEventsFor refuses an events list name that is empty or equal to a
// queue name, and, in Redis Cluster, one without the queue names' hash tag
// (the queue names are checked as ValidateFor does): every bigtables key
// then lives in one slot.
func (n Names) ValidateEventsFor(rdb redis.UniversalClient, list string) error {
	if err := n.ValidateFor(rdb); err != nil {
		return err
	}
	if list == "" {
		return fmt.Errorf("events list name must not be empty")
	}
	if list == n.Input || list == n.Output || list == n.Dead {
		return fmt.Errorf("events list %q must differ from the queue names (input %q, output %q, dead %q)", list, n.Input, n.Output, n.Dead)
	}
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	want, _ := hashTag(n.Input)
	if tag, ok := hashTag(list); !ok || tag != want {
		return fmt.Errorf("events list %q: in Redis Cluster it must carry the queue names' hash tag {%s}, e.g. %q", list, want, "{"+want+"}-events")
	}
	return nil
}

// PushEvent appends one event's JSON to the list named list (RPUSH), for
// consumers in any language to pop (LPOP/BLPOP, oldest first). A lost reply
// may make the client retry, so an event can land twice: consumers
// de-duplicate by its id.
func (q *Queue) PushEvent(ctx context.Context, list string, event []byte) error {
	if err := q.rdb.RPush(ctx, list, event).Err(); err != nil {
		return fmt.Errorf("push event to %s: %w", list, err)
	}
	return nil
}

// ValidateEvents is ValidateEventsFor with the queue's names and client.
func (q *Queue) ValidateEvents(list string) error { return q.names.ValidateEventsFor(q.rdb, list) }
