package testsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelPassword is the password of the servers and Sentinels that
// RedisSentinel starts, chosen to need percent-encoding in the URL.
const SentinelPassword = "s3cr@t/pw"

// RedisCluster returns the URL of a Redis Cluster of 3 masters and 3
// replicas: TEST_REDIS_CLUSTER_URL, or else a private one that
// scripts/redis-cluster.sh starts on free ports for the test and stops
// when it ends (about 3 s).
func RedisCluster(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TEST_REDIS_CLUSTER_URL"); u != "" {
		return u
	}
	// The bus ports (port + 10000) stay below Linux's ephemeral range.
	return startScript(t, "redis-cluster.sh", 20000, 6, 10000, nil)
}

// RedisSentinel returns the URL of a Sentinel-managed Redis (a master, a
// replica, 3 Sentinels): TEST_REDIS_SENTINEL_URL, or else a private one that
// scripts/redis-sentinel.sh starts on free ports for the test, with
// SentinelPassword, and stops when it ends (about 5 s).
func RedisSentinel(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TEST_REDIS_SENTINEL_URL"); u != "" {
		return u
	}
	return startScript(t, "redis-sentinel.sh", 23000, 5, 0, []string{"REDIS_PASSWORD=" + SentinelPassword})
}

// ScriptPath returns the path of scripts/name in this module.
func ScriptPath(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", name), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreePorts returns the first of n consecutive free ports on 127.0.0.1
// (each port + bus too, when bus is not 0), from a random start in
// [from, from+2000).
func FreePorts(from, n, bus int) (int, error) {
	free := func(p int) bool {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
next:
	for range 50 {
		base := from + rand.IntN(2000)
		for p := base; p < base+n; p++ {
			if !free(p) || bus != 0 && !free(p+bus) {
				continue next
			}
		}
		return base, nil
	}
	return 0, fmt.Errorf("no %d free consecutive ports from %d", n, from)
}

func startScript(t testing.TB, name string, from, n, bus int, env []string) string {
	t.Helper()
	script, err := ScriptPath(name)
	if err != nil {
		t.Fatal(err)
	}
	base, err := FreePorts(from, n, bus)
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(base)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // may install packages
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "start", port)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	stop := func() {
		if out, err := exec.Command(script, "stop", port).CombinedOutput(); err != nil {
			t.Errorf("%s stop %s: %v: %s", name, port, err, out)
		}
	}
	if err != nil {
		stop()
		unavailable(t, "scripts/"+name, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String())))
	}
	t.Cleanup(stop)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
