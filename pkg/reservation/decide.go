package reservation

// decide is the decision Reconcile applies: Decide. Only a test build with
// the flotilla_planted_bug tag replaces it (planted_bug.go), so that the
// chaos test can show its checker catches a broken election; no production
// binary holds that file.
var decide = Decide
