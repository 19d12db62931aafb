package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// InstallCRDs creates or updates Flotilla's CRDs (config/crd of the
// checkout) and waits until the API server serves them.
func (c *Cluster) InstallCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s (run make generate): %v", filepath.Join(root, "config", "crd"), err)
	}
	cs, err := apiextensionsclient.NewForConfig(jsonConfig(c.RESTConfig()))
	if err != nil {
		return err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		names = append(names, crd.Name)
		got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = got.ResourceVersion
			_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	return poll(ctx, 30*time.Second, func() (bool, error) {
		for _, n := range names {
			crd, err := api.Get(ctx, n, metav1.GetOptions{})
			if err != nil || !established(crd) {
				return false, nil
			}
		}
		return true, nil
	})
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// jsonConfig is cfg speaking JSON: custom resources have no protobuf.
func jsonConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	return cfg
}

// Scheme has the built-in kinds and Flotilla's.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}()

// CRClient is a controller-runtime client with cluster-admin rights that
// knows Flotilla's kinds.
func (c *Cluster) CRClient() client.Client {
	cl, err := client.New(jsonConfig(c.RESTConfig()), client.Options{Scheme: Scheme})
	if err != nil {
		panic(err)
	}
	return cl
}
