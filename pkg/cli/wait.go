package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// pollInterval is how often a command looks at an object it waits for.
const pollInterval = 500 * time.Millisecond

// errNotYet ends a wait that timed out; the caller says what it saw.
var errNotYet = errors.New("not yet")

// waitUntil calls check until it reports done, fails, or timeout passes
// (errNotYet). check's errors end the wait; transient ones should be
// reported as not done.
func waitUntil(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, check)
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return errNotYet
	}
	return err
}

// progress prints, on stderr, each new reason of a condition while a
// command waits, so a slow step shows what it waits for.
type progress struct {
	w    io.Writer
	last string
}

func (p *progress) report(c *metav1.Condition) {
	if c == nil {
		return
	}
	line := fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	if line != p.last {
		fmt.Fprintf(p.w, "  %s\n", line)
		p.last = line
	}
}

// readyCondition is the Ready condition, if the status describes the
// object's current generation.
func readyCondition(conds []metav1.Condition, observed, generation int64) *metav1.Condition {
	if observed < generation {
		return nil
	}
	return meta.FindStatusCondition(conds, "Ready")
}

// writeConditions prints conditions as a table, each with what to do when
// it is not as it should be.
func writeConditions(w io.Writer, conds []metav1.Condition) {
	if len(conds) == 0 {
		fmt.Fprintln(w, "  (no conditions yet)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, c := range conds {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, oneLine(c.Message))
	}
	tw.Flush()
}

// hint is what to do about a condition reason, as docs/invite-a-source.md
// (invitation status) and docs/join-a-target.md (target status) say.
func hint(reason string) string {
	switch reason {
	case v1alpha1.ReasonConnecting:
		return "the source is listing its candidates in the target: wait a few seconds; if it stays, read the agent's log"
	case v1alpha1.ReasonSecretNotFound:
		return "the kubeconfig Secret is missing: run join again, or check the ClusterTarget's kubeconfigSecretRef and --agent-namespace"
	case v1alpha1.ReasonSecretForbidden:
		return "the agent may not read the Secret: grant it get on Secrets there, or join with the agent's namespace (--agent-namespace)"
	case v1alpha1.ReasonKubeconfigInvalid, v1alpha1.ReasonKubeconfigRefused:
		return "fix the kubeconfig: inline data, a token or client certificate, no exec plugins or file paths (or invite again and join with the new file)"
	case v1alpha1.ReasonUnreachable:
		return "the target's API server does not answer: check the kubeconfig's server (the target agent's invitations.server, chart value agent.invitationServer) and the network between the clusters"
	case v1alpha1.ReasonUnauthorized:
		return "the target refuses the token (expired or revoked): run invite in the target again and join with the new file"
	case v1alpha1.ReasonForbidden:
		return "the target does not let this source do what it needs: check the invitation in the target (kubectl flotilla status there), and that the source agent's clusterName is the invitation's cluster name"
	case v1alpha1.ReasonServerError:
		return "the target's API server fails: look at it"
	case v1alpha1.ReasonTokenRenewalFailed:
		return "the token could not be renewed: run invite in the target again and join with the new file before it expires"
	case v1alpha1.ReasonSummaryInvalid:
		return "the target's ClusterSummary fails the source's checks: tell the target's operators"
	case v1alpha1.ReasonInvalidSpec:
		return "fix the invitation's namespaces or namespace selector"
	case v1alpha1.ReasonPolicyPending:
		return "the admission policy is new: wait a few seconds"
	case v1alpha1.ReasonApplyFailed:
		return "the agent could not create what the invitation needs: read the message, usually the agent's RBAC"
	case v1alpha1.ReasonNamespacesMissing:
		return "create the namespaces, or invite with --create-namespaces"
	case "Draining":
		return "the target was deleted and waits for its pods to end"
	}
	return ""
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
