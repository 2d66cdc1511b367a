package mlpolicy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// SecretNameKeyBytes is the length of the key SecretNames is made from: 256 bits, the
// block of HMAC-SHA256's hash, which a shorter key would not fill.
const SecretNameKeyBytes = 32

// secretNameSuffixLength is the length of a create-only Secret's name suffix: 10
// base32 characters, 50 bits of the HMAC. Guessing one in advance takes ~2^49 tries,
// each a Secret created (quota bounds those long before).
const secretNameSuffixLength = 10

// suffixEncoding is base32 in lower case without padding: DNS-1123 label characters.
var suffixEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// SecretNames gives the create-only Secrets of a TrainJob (MPI's SSH key, Flux's CURVE
// certificate) names that no one in the TrainJob's namespace can know before the
// controller creates them, and that the controller derives again on every rebuild:
// "<trainjob>-<purpose>-<suffix>", the suffix an HMAC-SHA256 of the TrainJob's UID
// under the installation's key (docs/design/side-objects.md). So a Secret of that name
// that exists was created by the controller for this very TrainJob (a retry after a
// crash, or an earlier pass): the status stage takes AlreadyExists as success without
// reading anything, a squatter cannot create it first, and a TrainJob re-created under
// the same name (another UID) gets another Secret.
//
// The zero value uses an empty key, which makes the names computable by anyone: it is
// for offline rendering (`trainyard render` without --secret-name-key) and tests only.
type SecretNames struct {
	key []byte
}

// NewSecretNames returns the SecretNames of key, which must be SecretNameKeyBytes long
// (the controller keeps one per installation in a Secret of its namespace); another
// length is an error.
func NewSecretNames(key []byte) (SecretNames, error) {
	if len(key) != SecretNameKeyBytes {
		return SecretNames{}, fmt.Errorf("the Secret-name key has %d bytes, want %d", len(key), SecretNameKeyBytes)
	}
	return SecretNames{key: append([]byte(nil), key...)}, nil
}

// Name returns the name of tj's create-only Secret for purpose (a DNS-1123 label such
// as "mpi-ssh-auth"): "<tj.Name>-<purpose>-<suffix>", at most 253 characters (a
// Secret's name is a DNS-1123 subdomain); a TrainJob name too long for that is cut,
// deterministically, and the suffix keeps names apart.
func (n SecretNames) Name(tj *trainer.TrainJob, purpose string) string {
	mac := hmac.New(sha256.New, n.key)
	mac.Write([]byte(tj.UID))
	suffix := suffixEncoding.EncodeToString(mac.Sum(nil))[:secretNameSuffixLength]
	tail := "-" + purpose + "-" + suffix
	prefix := tj.Name
	if room := validation.DNS1123SubdomainMaxLength - len(tail); len(prefix) > room {
		// A cut may end on "." or "-", which cannot precede "-".
		prefix = strings.TrimRight(prefix[:room], ".-")
	}
	return prefix + tail
}
