package chaos

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

// The private Redis leaves no temporary directory behind, across restarts.
func TestRedisServerRemovesItsDirectory(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH in CI: %v (scripts/services.sh installs it)", err)
		}
		t.Skipf("skipping: redis-server is not on PATH: %v (scripts/services.sh installs it)", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &redisServer{bin: bin, port: port}
	var dirs []string
	for range 2 { // start, and restart as the run does
		if err := s.start(context.Background()); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, s.dir)
		s.stop()
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("redis-server directory %s is still there after stop (stat: %v)", d, err)
			os.RemoveAll(d)
		}
	}
}
