//go:build flotilla_planted_unjudged

package reservation

// A bug planted on purpose, compiled only with -tags
// flotilla_planted_unjudged (test/scenario builds such an agent into a
// folder of its own): a re-election (an election that moves from one
// reservation to another) is made without the placement policy's
// judgement, as the agent once did, so a spread's maxSkew can be broken;
// the scenario checker must say so.
func init() { decide = unjudgedReelection }

func unjudgedReelection(in Input) Decision {
	if !in.Election.Elected() {
		return Decide(in)
	}
	unjudged := in
	unjudged.Policy = nil
	return Decide(unjudged)
}
