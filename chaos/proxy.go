package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"sync"
	"time"
)

// proxy is a TCP proxy between the bigtables processes and Redis that loses
// replies, drops connections and makes Redis unreachable for short windows,
// the network faults a process cannot tell from a Redis outage.
//
// A lost reply is the nasty one: Redis ran the command, but the client sees
// its connection fail and, for go-redis, retries the command (three times by
// default). The proxy forwards the command, discards what Redis answers, and
// closes the client's connection a moment later, which is how a reply lost
// on the network looks to go-redis.
type proxy struct {
	upstream string
	ln       net.Listener
	count    func(kind string) // called once per fault injected
	now      func() time.Time
	closing  chan struct{}
	wg       sync.WaitGroup

	mu        sync.Mutex
	conns     map[*pipe]struct{}
	dropUntil time.Time // replies are lost until then (see dropReplies)
	dropEvery int       // while dropping, one reply in dropEvery is lost, starting with the first
	dropSeen  int
	downUntil time.Time // connections are refused until then
	trigger   *outageTrigger
	jobs      map[string]time.Time // attempt uid -> when a job for it was first forwarded to Redis
}

// jobAttempt finds the attempt of a job in a command (a result has no
// input_url, and inside a dead letter its quotes are escaped).
var jobAttempt = regexp.MustCompile(`"refresh_attempt_uid":"([^"\\]{1,200})","input_url"`)

// Fault kinds the proxy counts.
const (
	faultReplyDropped = "Redis reply lost (the command ran)"
	faultConnDropped  = "Redis connection dropped"
	faultPushOutage   = "Redis unreachable for 1-2 s during a job push"
)

// outageTrigger makes Redis unreachable when a command carrying pattern
// passes: the command is forwarded (and its reply lost) or not, then every
// connection is closed and new ones are refused for d.
type outageTrigger struct {
	pattern []byte
	forward bool
	d       time.Duration
	fired   chan struct{}
}

// pipe is one client connection and its connection to Redis.
type pipe struct {
	client, server net.Conn
	once           sync.Once
	mu             sync.Mutex
	losing         bool   // this connection's replies are being lost; it closes soon
	carry          []byte // the end of the last chunk forwarded, for a job split across reads
}

func (p *pipe) close() {
	p.once.Do(func() {
		p.client.Close()
		p.server.Close()
	})
}

// newProxy listens on a free 127.0.0.1 port and forwards to upstream; now
// (default time.Now) times the windows.
func newProxy(upstream string, count func(kind string), now func() time.Time) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	if count == nil {
		count = func(string) {}
	}
	if now == nil {
		now = time.Now
	}
	p := &proxy{upstream: upstream, ln: ln, count: count, now: now, closing: make(chan struct{}),
		conns: map[*pipe]struct{}{}, jobs: map[string]time.Time{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address processes connect to instead of Redis's.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection.
func (p *proxy) Close() {
	close(p.closing)
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		down := p.now().Before(p.downUntil)
		p.mu.Unlock()
		if down {
			refuse(c)
			continue
		}
		s, err := net.DialTimeout("tcp", p.upstream, time.Second)
		if err != nil { // Redis itself is down (restarted by the run)
			refuse(c)
			continue
		}
		pp := &pipe{client: c, server: s}
		p.mu.Lock()
		p.conns[pp] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(pp) })
		p.wg.Go(func() { p.backward(pp) })
	}
}

// refuse resets the connection at once, as a refused connection fails.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *proxy) forget(pp *pipe) {
	pp.close()
	p.mu.Lock()
	delete(p.conns, pp)
	p.mu.Unlock()
}

// forward copies commands from the client to Redis, watching for the
// outage trigger.
func (p *proxy) forward(pp *pipe) {
	defer p.forget(pp)
	buf := make([]byte, 32<<10)
	for {
		n, err := pp.client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			t := p.trigger
			if t != nil && bytes.Contains(chunk, t.pattern) {
				p.trigger = nil
			} else {
				t = nil
			}
			p.mu.Unlock()
			if t != nil {
				p.fire(pp, t, chunk)
				return
			}
			p.noteJobs(pp, chunk)
			if _, werr := pp.server.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// fire starts the outage armed by t, on the command in chunk.
func (p *proxy) fire(pp *pipe, t *outageTrigger, chunk []byte) {
	if t.forward {
		pp.mu.Lock()
		pp.losing = true
		pp.mu.Unlock()
		p.noteJobs(pp, chunk)
		pp.server.Write(chunk)
		time.Sleep(50 * time.Millisecond) // Redis runs it; its reply is lost
	}
	p.outage(t.d)
	p.count(faultPushOutage)
	close(t.fired)
}

// noteJobs records the attempts of the jobs in a chunk about to be
// forwarded, with the end of the previous chunk before it.
func (p *proxy) noteJobs(pp *pipe, chunk []byte) {
	data := append(pp.carry, chunk...)
	if bytes.Contains(data, []byte(`"input_url"`)) {
		now := p.now()
		p.mu.Lock()
		for _, m := range jobAttempt.FindAllSubmatch(data, -1) {
			if _, ok := p.jobs[string(m[1])]; !ok {
				p.jobs[string(m[1])] = now
			}
		}
		p.mu.Unlock()
	}
	pp.carry = append(pp.carry[:0], data[max(len(data)-300, 0):]...)
}

// forwarded returns when a job for each attempt was first forwarded to Redis.
func (p *proxy) forwarded() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.jobs)
}

// backward copies replies from Redis to the client, losing them while a
// drop window is open.
func (p *proxy) backward(pp *pipe) {
	defer p.forget(pp)
	buf := make([]byte, 32<<10)
	for {
		n, err := pp.server.Read(buf)
		if n > 0 {
			pp.mu.Lock()
			losing := pp.losing
			pp.mu.Unlock()
			if !losing && p.loseThisReply() {
				pp.mu.Lock()
				pp.losing = true
				pp.mu.Unlock()
				p.count(faultReplyDropped)
				time.AfterFunc(100*time.Millisecond, pp.close)
				losing = true
			}
			if !losing {
				if _, werr := pp.client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) loseThisReply() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.now().Before(p.dropUntil) {
		return false
	}
	p.dropSeen++
	return (p.dropSeen-1)%p.dropEvery == 0
}

// dropReplies loses the first reply and then one in every (at least 1) for
// the next d: the commands run, their clients see their connections fail.
func (p *proxy) dropReplies(d time.Duration, every int) {
	p.mu.Lock()
	p.dropUntil, p.dropEvery, p.dropSeen = p.now().Add(d), max(every, 1), 0
	p.mu.Unlock()
}

// dropConns closes up to n connections (pick chooses among them by index)
// and returns how many it closed.
func (p *proxy) dropConns(n int, pick func(int) int) int {
	p.mu.Lock()
	all := make([]*pipe, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	closed := 0
	for ; closed < n && len(all) > 0; closed++ {
		i := pick(len(all))
		all[i].close()
		all = append(all[:i], all[i+1:]...)
		p.count(faultConnDropped)
	}
	return closed
}

// outage closes every connection and refuses new ones for d.
func (p *proxy) outage(d time.Duration) {
	p.mu.Lock()
	p.downUntil = p.now().Add(d)
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
}

// down reports whether connections are being refused now.
func (p *proxy) down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now().Before(p.downUntil)
}

// outageOn arms an outage of d that starts when the next command carrying
// pattern passes (forwarded first if forward is set), and returns a channel
// closed when it started. Arming again replaces an unfired trigger.
func (p *proxy) outageOn(pattern []byte, forward bool, d time.Duration) <-chan struct{} {
	t := &outageTrigger{pattern: pattern, forward: forward, d: d, fired: make(chan struct{})}
	p.mu.Lock()
	p.trigger = t
	p.mu.Unlock()
	return t.fired
}

// disarm removes an unfired outage trigger.
func (p *proxy) disarm() {
	p.mu.Lock()
	p.trigger = nil
	p.mu.Unlock()
}
