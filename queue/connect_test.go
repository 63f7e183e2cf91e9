package queue

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseURLGood(t *testing.T) {
	type want struct {
		kind      string // simple, failover, cluster
		addrs     []string
		master    string
		db        int
		user, pw  string
		tls, skip bool
		dial      time.Duration
		readOnly  bool
	}
	for _, tc := range []struct {
		url  string
		want want
	}{
		{"redis://127.0.0.1:6379/0", want{kind: "simple", addrs: []string{"127.0.0.1:6379"}, dial: defaultTimeout}},
		{"rediss://u:p@h:6380/2?dial_timeout=1s", want{kind: "simple", addrs: []string{"h:6380"}, db: 2, user: "u", pw: "p", tls: true, dial: time.Second}},
		{"redis-sentinel://:pw@h1:26379,h2:26380,h3/2?master=mymaster",
			want{kind: "failover", addrs: []string{"h1:26379", "h2:26380", "h3:26379"}, master: "mymaster", db: 2, pw: "pw", dial: defaultTimeout}},
		{"redis-sentinel://10.0.0.1:5000?master=m&dial_timeout=2s",
			want{kind: "failover", addrs: []string{"10.0.0.1:5000"}, master: "m", dial: 2 * time.Second}},
		{"rediss-sentinel://u:p%2Fw@h1:1/0?master=m&skip_verify=true",
			want{kind: "failover", addrs: []string{"h1:1"}, master: "m", user: "u", pw: "p/w", tls: true, skip: true, dial: defaultTimeout}},
		{"REDIS-SENTINEL://h1:1,h2:2?master=m", want{kind: "failover", addrs: []string{"h1:1", "h2:2"}, master: "m", dial: defaultTimeout}},
		{"redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
			want{kind: "cluster", addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}, dial: defaultTimeout}},
		{"redis+cluster://u:p%40ss@[::1]:7000,[::1]:7001,::1/0?read_only=true",
			want{kind: "cluster", addrs: []string{"[::1]:7000", "[::1]:7001", "[::1]:6379"}, user: "u", pw: "p@ss", readOnly: true, dial: defaultTimeout}},
		{"rediss+cluster://:pw@h:7000/", want{kind: "cluster", addrs: []string{"h:7000"}, pw: "pw", tls: true, dial: defaultTimeout}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := parseURL(tc.url)
			if err != nil {
				t.Fatalf("parseURL: %v", err)
			}
			var got want
			switch {
			case o.simple != nil:
				s := o.simple
				got = want{kind: "simple", addrs: []string{s.Addr}, db: s.DB, user: s.Username, pw: s.Password,
					tls: s.TLSConfig != nil, dial: s.DialTimeout}
			case o.failover != nil:
				f := o.failover
				got = want{kind: "failover", addrs: f.SentinelAddrs, master: f.MasterName, db: f.DB, user: f.Username, pw: f.Password,
					tls: f.TLSConfig != nil, skip: f.TLSConfig != nil && f.TLSConfig.InsecureSkipVerify, dial: f.DialTimeout}
				if f.SentinelUsername != f.Username || f.SentinelPassword != f.Password {
					t.Errorf("Sentinel credentials %q/%q differ from the servers' %q/%q", f.SentinelUsername, f.SentinelPassword, f.Username, f.Password)
				}
			case o.cluster != nil:
				c := o.cluster
				got = want{kind: "cluster", addrs: c.Addrs, user: c.Username, pw: c.Password, tls: c.TLSConfig != nil,
					dial: c.DialTimeout, readOnly: c.ReadOnly}
			}
			if got.kind != tc.want.kind || !slices.Equal(got.addrs, tc.want.addrs) || got.master != tc.want.master || got.db != tc.want.db ||
				got.user != tc.want.user || got.pw != tc.want.pw || got.tls != tc.want.tls || got.skip != tc.want.skip ||
				got.dial != tc.want.dial || got.readOnly != tc.want.readOnly {
				t.Errorf("parseURL(%q) =\n %+v; want\n %+v", tc.url, got, tc.want)
			}
		})
	}
}

func TestParseURLBad(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", "not a URL: expected scheme://host:port"},
		{"http://:hunter2@h:1", `scheme "http": expected redis, rediss (TLS), redis-sentinel, rediss-sentinel, redis+cluster or rediss+cluster`},
		{"redis-sentinel://:hunter2@h1:1,h2:2/0", "a Sentinel URL needs ?master=NAME"},
		{"redis-sentinel://:hunter2@h1:1/0?master_name=m", "a Sentinel URL needs ?master=NAME"},
		{"redis-sentinel://:hunter2@h1:1,,h2:2/0?master=m", `empty address at position 2 of the host list "h1:1,,h2:2"`},
		{"redis-sentinel://:hunter2@h1:1/x?master=m", `redis: invalid database number: "x"`},
		{"redis-sentinel://:hunter2@h1:1/0?master=m#top", "a Redis URL has no #fragment"},
		{"redis+cluster://:hunter2@", "no host: expected host:port[,host:port...]"},
		{"redis+cluster://:hunter2@h1:99999", `address "h1:99999": port "99999" is not a number from 1 to 65535`},
		{"redis+cluster://:hunter2@h1:1,h2:x", `address "h2:x": port "x" is not a number from 1 to 65535`},
		{"redis+cluster://:hunter2@h1:1,:7000", `address ":7000": expected host:port`},
		{"redis+cluster://:hunter2@h1:1/3", `path "/3": Redis Cluster has only database 0`},
		{"redis+cluster://:hun/ter2@h1:1", "percent-encode '/', '?', '#' and '@' in the password"},
		{"redis+cluster://:hun?ter2@h1:1", "percent-encode '/', '?', '#' and '@' in the password"},
		{"redis+cluster://h1:1?password=hunter2", `option "password": put the credentials in the user info (redis+cluster://[user]:password@host:port,...), not in the query`},
		{"redis-sentinel://h1:1/0?master=m&sentinel_password=hunter2", `option "sentinel_password": put the credentials in the user info`},
		{"redis+cluster://:hunter2@h1:1?bogus=1", "redis: unexpected option: bogus"},
		{"redis+cluster://:hunter2@h1:1?dial_timeout=soon", "dial_timeout"},
		{"redis+cluster://:hunter2%zz@h1:1", "malformed URL: check the percent-encoding"},
		{"redis://:hunter2@h:1/0?bogus=1", "redis: unexpected option: bogus"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := parseURL(tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseURL(%q) = %v; want an error containing %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ter2") {
				t.Errorf("the error leaks the password: %v", err)
			}
			// Connect fails before dialling, and says which URL it read.
			// (Redact hides the password of the user info only: a URL with
			// one in the query is refused, but quoted as it is.)
			if strings.Contains(tc.url, "password=") {
				return
			}
			_, err = Connect(context.Background(), tc.url)
			if err == nil || !strings.HasPrefix(err.Error(), "parse Redis URL ") || strings.Contains(err.Error(), "ter2") {
				t.Errorf("Connect(%q) = %v; want a parse error without the password", tc.url, err)
			}
		})
	}
}

// Connecting to nothing fails promptly, and the error names the URL
// without its password.
func TestConnectUnreachable(t *testing.T) {
	for _, raw := range []string{
		"redis-sentinel://:hunter2@127.0.0.1:1,127.0.0.1:2/0?master=m&dial_timeout=1s",
		"redis+cluster://:hunter2@127.0.0.1:1,127.0.0.1:2?dial_timeout=1s",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := Connect(ctx, raw)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), "connect to Redis at ") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Connect(%q) = %v; want a connection error without the password", raw, err)
		}
	}
}

func TestValidateCluster(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	for _, tc := range []struct {
		names Names
		want  string // "" when valid in Cluster
	}{
		{Names{"{bt}-input", "{bt}-output", "{bt}-output-dead"}, ""},
		{Names{"app:{q}:in", "app:{q}:out", "{q}dead"}, ""},
		{DefaultNames(), `queue name "bigtables-input" has no hash tag: in Redis Cluster the keys of input "bigtables-input", output "bigtables-output" and dead "bigtables-output-dead" would spread over several slots; give the three names one hash tag, e.g. "{bt}-input", "{bt}-output" and "{bt}-output-dead"`},
		{Names{"{bt}-input", "{bt}-output", "dead"}, `queue name "dead" has no hash tag`},
		{Names{"{a}-input", "{b}-output", "{a}-dead"}, `queue names input "{a}-input", output "{b}-output" and dead "{a}-dead" have different hash tags`},
		{Names{"{}{bt}-input", "{bt}-output", "{bt}-dead"}, `queue name "{}{bt}-input" has no hash tag`}, // Redis hashes the whole key
		{Names{"{bt-input", "{bt}-output", "{bt}-dead"}, `queue name "{bt-input" has no hash tag`},
	} {
		err := tc.names.ValidateFor(cluster)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v in Cluster: %v; want %q", tc.names, err, tc.want)
		}
		if err := tc.names.ValidateFor(single); err != nil {
			t.Errorf("%+v outside Cluster: %v", tc.names, err)
		}
	}
	if err := (Names{"{bt}a", "{bt}a", "{bt}b"}).ValidateFor(cluster); err == nil {
		t.Error("clashing names accepted")
	}
}

// Every key of the system extends one of the names, so it keeps the names'
// tag: the suffixes cannot move a key to another slot.
func TestDerivedKeysKeepTheTag(t *testing.T) {
	n := Names{"{bt}-input", "{bt}-output", "{bt}-output-dead"}
	for _, key := range []string{n.Input, n.Output, n.Dead, n.processing("p}{x}"), n.pollers(), n.CancelKey("a{b}")} {
		if tag, ok := hashTag(key); !ok || tag != "bt" {
			t.Errorf("hashTag(%q) = %q, %v; want bt", key, tag, ok)
		}
	}
}
