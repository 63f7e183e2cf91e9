package queue

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The schemes of a Redis URL. redis:// and rediss:// (TLS) reach one server
// (go-redis's ParseURL); the others list several addresses separated by
// commas and reach a Sentinel-managed master or a Redis Cluster:
//
//	redis-sentinel://[[user]:password@]host:port[,host:port...][/db]?master=NAME[&option=value...]
//	redis+cluster://[[user]:password@]host:port[,host:port...][?option=value...]
//
// With Sentinel the addresses are the Sentinels', and the credentials are
// sent to the Sentinels as well as to the Redis servers (a Sentinel without a
// password accepts any). With Cluster any reachable nodes do: the client
// discovers the others. Options are go-redis's (dial_timeout, read_timeout,
// pool_size, max_retries, ...: ParseFailoverURL and ParseClusterURL); the
// password belongs in the user info, never in the query.
const (
	SchemeSentinel    = "redis-sentinel"
	SchemeSentinelTLS = "rediss-sentinel"
	SchemeCluster     = "redis+cluster"
	SchemeClusterTLS  = "rediss+cluster"
)

// defaultTimeout bounds dials, reads and writes unless the URL sets them;
// blocking pops extend the read timeout by their own.
const defaultTimeout = 5 * time.Second

// clientOptions is a parsed Redis URL: exactly one of its fields is set.
type clientOptions struct {
	simple   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// newClient builds go-redis's client for the options.
func (o clientOptions) newClient() redis.UniversalClient {
	switch {
	case o.failover != nil:
		return redis.NewFailoverClient(o.failover)
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster)
	default:
		return redis.NewClient(o.simple)
	}
}

// parseURL reads a Redis URL of any scheme into go-redis's options. Its
// errors never contain the password (callers still redact them, as go-redis's
// own messages may quote parts of the URL).
func parseURL(rawURL string) (clientOptions, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return clientOptions{}, errors.New("not a URL: expected scheme://host:port...")
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return clientOptions{}, err
		}
		setTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		return clientOptions{simple: o}, nil
	case SchemeSentinel, SchemeSentinelTLS:
		return parseSentinel(rawURL)
	case SchemeCluster, SchemeClusterTLS:
		return parseCluster(rawURL)
	default:
		return clientOptions{}, fmt.Errorf("scheme %q: expected redis, rediss (TLS), %s, %s, %s or %s",
			scheme, SchemeSentinel, SchemeSentinelTLS, SchemeCluster, SchemeClusterTLS)
	}
}

func setTimeouts(ts ...*time.Duration) {
	for _, t := range ts {
		if *t == 0 {
			*t = defaultTimeout
		}
	}
}

// multiURL is a URL with several addresses, split into what go-redis's
// parsers take: a redis:// or rediss:// URL naming the first address, with
// the others as addr options and without the credentials, which are set on
// the options afterwards.
type multiURL struct {
	goRedisURL         string
	username, password string
	path               string
}

func splitMulti(rawURL string, defaultPort int) (multiURL, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostList := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hostList = authority[:at], authority[at+1:]
	} else if strings.Contains(tail, "@") {
		// "redis+cluster://:pa/ss@host:port": the authority ends at the
		// unescaped '/', and what looks like a host is part of a password.
		return multiURL{}, errors.New("the URL has an '@' after its host list: percent-encode '/', '?', '#' and '@' in the password (%2F, %3F, %23, %40)")
	}
	if hostList == "" {
		return multiURL{}, errors.New("no host: expected host:port[,host:port...]")
	}
	var addrs []string
	for i, h := range strings.Split(hostList, ",") {
		if h == "" {
			return multiURL{}, fmt.Errorf("empty address at position %d of the host list %q", i+1, hostList)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port: the default one (as "host" or "[::1]").
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), strconv.Itoa(defaultPort)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return multiURL{}, fmt.Errorf("address %q: port %q is not a number from 1 to 65535", h, port)
		}
		if host == "" || strings.ContainsAny(host, "[]:/") && net.ParseIP(host) == nil {
			return multiURL{}, fmt.Errorf("address %q: expected host:port", h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	// Let net/url check the rest (user info, path, query) with the first
	// address as the host.
	u, err := url.Parse("redis://" + userinfo + at(userinfo) + addrs[0] + tail)
	if err != nil {
		return multiURL{}, errors.New("malformed URL: check the percent-encoding of the user info, path and query")
	}
	if u.Fragment != "" {
		return multiURL{}, errors.New("a Redis URL has no #fragment")
	}
	q := u.Query()
	for _, name := range []string{"password", "username", "sentinel_password", "sentinel_username"} {
		if q.Has(name) {
			return multiURL{}, fmt.Errorf("option %q: put the credentials in the user info (%s://[user]:password@host:port,...), not in the query", name, scheme)
		}
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	m := multiURL{path: u.Path}
	if u.User != nil {
		m.username = u.User.Username()
		m.password, _ = u.User.Password()
	}
	goScheme := "redis"
	if strings.HasPrefix(strings.ToLower(scheme), "rediss") {
		goScheme = "rediss"
	}
	m.goRedisURL = (&url.URL{Scheme: goScheme, Host: addrs[0], Path: u.Path, RawQuery: q.Encode()}).String()
	return m, nil
}

func at(userinfo string) string {
	if userinfo == "" {
		return ""
	}
	return "@"
}

// parseSentinel reads redis-sentinel:// and rediss-sentinel:// URLs.
func parseSentinel(rawURL string) (clientOptions, error) {
	m, err := splitMulti(rawURL, 26379)
	if err != nil {
		return clientOptions{}, err
	}
	u, _ := url.Parse(m.goRedisURL)
	q := u.Query()
	master := q.Get("master")
	if master == "" || q.Has("master_name") {
		return clientOptions{}, errors.New("a Sentinel URL needs ?master=NAME, the name under which the Sentinels monitor the master")
	}
	q.Del("master")
	q.Set("master_name", master)
	u.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return clientOptions{}, err
	}
	o.Username, o.Password = m.username, m.password
	o.SentinelUsername, o.SentinelPassword = m.username, m.password
	setTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
	return clientOptions{failover: o}, nil
}

// parseCluster reads redis+cluster:// and rediss+cluster:// URLs.
func parseCluster(rawURL string) (clientOptions, error) {
	m, err := splitMulti(rawURL, 6379)
	if err != nil {
		return clientOptions{}, err
	}
	if p := strings.Trim(m.path, "/"); p != "" && p != "0" {
		return clientOptions{}, fmt.Errorf("path %q: Redis Cluster has only database 0", m.path)
	}
	u, _ := url.Parse(m.goRedisURL)
	u.Path = ""
	o, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return clientOptions{}, err
	}
	o.Username, o.Password = m.username, m.password
	setTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
	return clientOptions{cluster: o}, nil
}

// ValidateFor is Validate plus, when rdb is a Redis Cluster client, the rule
// of Cluster: the scripts move values between the system's keys atomically,
// so every key (the lists, the processing lists, the pollers set, the
// cancellation markers) must land in one hash slot. Every key is one of the
// three names or one of them with a suffix, so the three names must carry
// the same hash tag. Outside Cluster any distinct names do, and the
// protocol's defaults stay as they are.
func (n Names) ValidateFor(rdb redis.UniversalClient) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	return n.validateCluster()
}

func (n Names) validateCluster() error {
	const hint = `give the three names one hash tag, e.g. "{bt}-input", "{bt}-output" and "{bt}-output-dead"`
	tags := map[string]bool{}
	for _, name := range []string{n.Input, n.Output, n.Dead} {
		tag, ok := hashTag(name)
		if !ok {
			return fmt.Errorf("queue name %q has no hash tag: in Redis Cluster the keys of input %q, output %q and dead %q would spread over several slots; %s",
				name, n.Input, n.Output, n.Dead, hint)
		}
		tags[tag] = true
	}
	if len(tags) > 1 {
		return fmt.Errorf("queue names input %q, output %q and dead %q have different hash tags: in Redis Cluster their keys would spread over several slots; %s",
			n.Input, n.Output, n.Dead, hint)
	}
	return nil
}

// hashTag returns what Redis Cluster hashes a key by when it is not the whole
// key: the text between the first '{' and the first '}' after it, if that is
// not empty. A key that extends a name with a tag keeps the name's tag.
func hashTag(key string) (string, bool) {
	_, after, ok := strings.Cut(key, "{")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(after, "}")
	if !ok || tag == "" {
		return "", false
	}
	return tag, true
}
