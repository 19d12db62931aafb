package target

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
)

// tokenClaims is what the source reads of its own ServiceAccount token: who
// it is and when the token was issued and expires. The token is not
// verified here (the target does that); a token that is not a
// ServiceAccount's is simply not renewed.
type tokenClaims struct {
	Subject   string `json:"sub"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expiry    int64  `json:"exp"`
}

// parseToken reads the claims of a JWT.
func parseToken(token string) (tokenClaims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return tokenClaims{}, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return tokenClaims{}, fmt.Errorf("token payload: %w", err)
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return tokenClaims{}, fmt.Errorf("token payload: %w", err)
	}
	if c.IssuedAt == 0 {
		c.IssuedAt = c.NotBefore
	}
	return c, nil
}

// serviceAccount is the namespace and name of a ServiceAccount token's
// subject ("system:serviceaccount:<namespace>:<name>").
func (c tokenClaims) serviceAccount() (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(c.Subject, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

// renewDue reports whether a token issued at iat and expiring at exp should
// be renewed at now, once the share after of its lifetime has passed.
func renewDue(c tokenClaims, now time.Time, after float64) bool {
	if c.Expiry == 0 || c.IssuedAt == 0 || c.Expiry <= c.IssuedAt {
		return false
	}
	life := time.Duration(c.Expiry-c.IssuedAt) * time.Second
	return now.After(time.Unix(c.IssuedAt, 0).Add(time.Duration(float64(life) * after)))
}

// renewToken asks the target for a new token of the source's own
// ServiceAccount, of the same lifetime as the current one. The invitation
// allows TokenRequest on that one ServiceAccount only.
func (t *Target) renewToken(ctx context.Context, c tokenClaims) (string, time.Time, error) {
	ns, name, ok := c.serviceAccount()
	if !ok {
		return "", time.Time{}, fmt.Errorf("the token is not a ServiceAccount's (subject %q)", c.Subject)
	}
	ttl := c.Expiry - c.IssuedAt
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	request := func(ttl int64) (*authenticationv1.TokenRequest, error) {
		return t.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
		}, metav1.CreateOptions{})
	}
	tr, err := request(ttl)
	if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && ttl > shortestToken {
		// The invitation's maxTokenLifetime may have been lowered below
		// the lifetime of the token held: the shortest token any bound
		// allows keeps the source connected until its Secret is renewed.
		tr, err = request(shortestToken)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// shortestToken is v1alpha1.MinTokenLifetime in seconds.
var shortestToken = int64(v1alpha1.MinTokenLifetime.Seconds())

// withToken returns the kubeconfig in secret[key] with the current
// context's user token replaced.
func withToken(secret *corev1.Secret, key, token string) ([]byte, error) {
	return kubeconfig.WithToken(secret.Data[key], token)
}

// renew renews the token of the kubeconfig once the share TokenRenewAfter
// of its lifetime has passed, stores it back in the Secret and hands it to
// the running client. A token that is not a ServiceAccount's is left alone.
func (c *Controller) renew(ctx context.Context, v view, t *Target) {
	if v.secretObj == nil || t.Token() == "" {
		return
	}
	claims, err := parseToken(t.Token())
	if err != nil {
		return
	}
	if _, _, ok := claims.serviceAccount(); !ok || claims.Expiry == 0 {
		return
	}
	exp := metav1.NewTime(time.Unix(claims.Expiry, 0))
	v.status.TokenExpirationTime = &exp
	if !renewDue(claims, c.clock().Now(), c.TokenRenewAfter) {
		return
	}
	token, expires, err := t.renewToken(ctx, claims)
	if err == nil {
		var data []byte
		if v.tokenOnly {
			data = []byte(token)
		} else {
			data, err = withToken(v.secretObj, v.secretKey, token)
		}
		if err == nil {
			secret := v.secretObj.DeepCopy()
			secret.Data[v.secretKey] = data
			err = c.Client.Update(ctx, secret)
		}
	}
	if err != nil {
		setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonTokenRenewalFailed,
			fmt.Sprintf("Renewing the token that expires at %s: %v", exp.UTC().Format(time.RFC3339), err))
		return
	}
	t.SetToken(token)
	exp = metav1.NewTime(expires)
	v.status.TokenExpirationTime = &exp
	klog.FromContext(ctx).V(2).Info("Renewed the target's token", "target", t.Name, "expires", expires)
}
