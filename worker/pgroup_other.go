//go:build !unix

package worker

import (
	"os"
	"os/exec"
)

// ownProcessGroup is a no-op without Unix process groups: cancelling the
// command's context kills the shell only.
func ownProcessGroup(cmd *exec.Cmd) {}

func killProcessGroup(pid int) error { return os.ErrProcessDone }
