package poller

// SetHooks lets a test stop a batch inside its transaction (inTx, after its
// writes, before the commit) or between its commit and its acknowledgement
// (beforeAck; an error leaves the batch unacknowledged, as a lost reply or a
// crash would).
func SetHooks(p *Poller, inTx func(), beforeAck func() error) {
	p.hooks.inTx, p.hooks.beforeAck = inTx, beforeAck
}
