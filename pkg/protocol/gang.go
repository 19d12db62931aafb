package protocol

import (
	"crypto/sha256"
	"encoding/hex"
)

// A gang is a set of source pods placed all or nothing: none is allowed
// to bind until enough of them hold reservations that together satisfy
// the gang's mode.
const (
	// PodGroupLabel names the gang a pod belongs to, among the pods of its
	// namespace: the label of scheduler-plugins' coscheduling.
	PodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// GangMinMemberAnnotation is, on a member, how many members must hold
	// their places at once before any is allowed to bind (a positive
	// integer); every member gives the same.
	GangMinMemberAnnotation = Prefix + "gang-min-member"
	// GangModeAnnotation is, on a member, where the gang may go:
	// GangOneCluster (the default) or GangAnyClusters.
	GangModeAnnotation = Prefix + "gang-mode"
)

// Gang modes.
const (
	// GangOneCluster places every member in one target: for jobs that need
	// a fast interconnect between their members.
	GangOneCluster = "oneCluster"
	// GangAnyClusters lets members go to different targets, still all or
	// nothing.
	GangAnyClusters = "anyClusters"
)

// GangAnnotation, on a member, asks for a gang of the pod's owner, sized
// by the owner's parallelism: GangOfJob (the pod's Job) or GangOfJobSet
// (the JobSet its Job belongs to).
const GangAnnotation = Prefix + "gang"

// What GangAnnotation may ask for.
const (
	GangOfJob    = "job"
	GangOfJobSet = "jobset"
)

// JobSetNameLabel is the label JobSet's controller puts on the pods of its
// Jobs: the JobSet's name.
const JobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"

// ShareAnnotation, on a candidate, names the gang share it belongs to:
// the members of one source gang that are candidates in one target. Its
// value is opaque to the target (ShareOf, a hash of the gang's key), so
// that candidates name no object of the source. The target's scheduler
// holds a share's reservations together (docs/gangs.md): while members
// keep joining, none of them times out, and when the share was not
// allowed in time, all of its members are let go at once.
const ShareAnnotation = Prefix + "gang-share"

// ShareOf is the value of ShareAnnotation for the gang of key.
func ShareOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// ValidShare reports whether v may be a ShareAnnotation value: 1 to 63
// lowercase letters, digits and dashes. A candidate with any other value
// belongs to no share.
func ValidShare(v string) bool {
	if len(v) == 0 || len(v) > 63 {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
