package refresh

import (
	"fmt"
	"sync"
	"time"

	"github.com/bigtables/bigtables/schedule"
)

// RulesCache parses stored schedule and policy texts into Rules once: most
// records share a handful of policies, and the scheduler and poller look
// them up for every row of every batch. Safe for concurrent use; the values
// it hands out are immutable. It forgets everything when it holds more than
// its capacity, which bounds its memory.
type RulesCache struct {
	mu       sync.Mutex
	capacity int
	m        map[string]cached
}

type cached struct {
	rules Rules
	err   error
}

// NewRulesCache returns a cache holding up to capacity distinct rule texts
// (10,000 when capacity <= 0).
func NewRulesCache(capacity int) *RulesCache {
	if capacity <= 0 {
		capacity = 10_000
	}
	return &RulesCache{capacity: capacity, m: make(map[string]cached)}
}

// Get returns the Rules for stored texts, or why they cannot be used.
func (c *RulesCache) Get(scheduleText string, policyJSON []byte) (Rules, error) {
	key := scheduleText + "\x00" + string(policyJSON)
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return v.rules, v.err
	}
	v.rules, v.err = parseRules(scheduleText, policyJSON)
	c.mu.Lock()
	if len(c.m) >= c.capacity {
		clear(c.m)
	}
	c.m[key] = v
	c.mu.Unlock()
	return v.rules, v.err
}

func parseRules(scheduleText string, policyJSON []byte) (Rules, error) {
	s, err := schedule.Parse(scheduleText, time.Time{})
	if err != nil {
		return Rules{}, fmt.Errorf("stored schedule: %w", err)
	}
	p, err := ParsePolicy(policyJSON, nil)
	if err != nil {
		return Rules{}, fmt.Errorf("stored policy: %w", err)
	}
	return Rules{Schedule: s, Policy: p}, nil
}
