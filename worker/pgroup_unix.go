//go:build unix

package worker

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd as the leader of a new process group (its pid
// is the group id), and makes cancelling its context kill the whole group.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killProcessGroup(cmd.Process.Pid) }
}

// killProcessGroup sends SIGKILL to every process of the group pgid, and
// returns os.ErrProcessDone when none is left.
//
// A group id stays reserved while any process of the group lives, or while
// its leader is not yet reaped; only once the group is empty and its leader
// reaped could the number be reused, which takes the kernel's pid counter
// wrapping around in between: accepted.
func killProcessGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
