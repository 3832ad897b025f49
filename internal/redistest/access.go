package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Access says who may talk to a server and how: the default user's
// password, ACL users, TLS. The zero value is Redis's own default: anyone,
// no password, plain TCP. The package's own calls (redis-cli for PING,
// INFO, the Cluster tooling) go as the default user with Password and,
// under TLS, trust TLS's CA, so a test can lock every other client out.
type Access struct {
	// Password is the default user's password (requirepass); a Cluster's
	// replicas authenticate to their primaries with it (masterauth).
	// Default: none.
	Password string

	// Users are ACL users, each the rules of one "user" directive of
	// redis.conf, for example "app on >secret ~app:* +@all". Default: none.
	Users []string

	// TLS, when set, makes the server speak TLS only (port 0, tls-port)
	// with TLS's server certificate, and not ask clients for one; a
	// Cluster's bus and replication go over TLS too (tls-cluster,
	// tls-replication). Default: plain TCP.
	TLS *CA
}

// args returns what a adds to redis-server's command line for a server
// listening on port.
func (a Access) args(port int, cluster bool) []string {
	var args []string
	if a.TLS == nil {
		args = append(args, "--port", strconv.Itoa(port))
	} else {
		args = append(args,
			"--port", "0",
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", a.TLS.ServerCertFile,
			"--tls-key-file", a.TLS.ServerKeyFile,
			"--tls-ca-cert-file", a.TLS.CertFile,
			"--tls-auth-clients", "no",
		)
		if cluster {
			args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes")
		}
	}
	if a.Password != "" {
		args = append(args, "--requirepass", a.Password)
		if cluster {
			args = append(args, "--masterauth", a.Password)
		}
	}
	for _, u := range a.Users {
		// redis-server joins the words after --user into one directive,
		// quoting each: the rules must come as separate words.
		args = append(append(args, "--user"), strings.Fields(u)...)
	}
	return args
}

// cliArgs returns redis-cli's options to connect as the default user.
func (a Access) cliArgs() []string {
	var args []string
	if a.Password != "" {
		args = append(args, "-a", a.Password, "--no-auth-warning")
	}
	if a.TLS != nil {
		args = append(args, "--tls", "--cacert", a.TLS.CertFile)
	}
	return args
}

// CA is a certificate authority made for one test or lab run, and a
// server certificate it signed for 127.0.0.1, as PEM files.
type CA struct {
	// CertFile is the CA's certificate: what a client trusts
	// (redis-cli --cacert, a tls.Config's RootCAs).
	CertFile string
	// ServerCertFile and ServerKeyFile are the server's certificate, valid
	// for 127.0.0.1 and localhost, and its key.
	ServerCertFile string
	ServerKeyFile  string

	pool *x509.CertPool
}

// NewCA makes a CA and a server certificate and writes them to dir.
// They are valid from an hour ago for a day.
func NewCA(dir string) (*CA, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "holdfast test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client auth too: Cluster nodes present it to each other on the
		// bus and to their primaries when replicating.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("redistest: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("redistest: server key: %w", err)
	}
	ca := &CA{
		CertFile:       filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		pool:           x509.NewCertPool(),
	}
	ca.pool.AddCert(caCert)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{ca.CertFile, "CERTIFICATE", caDER},
		{ca.ServerCertFile, "CERTIFICATE", der},
		{ca.ServerKeyFile, "EC PRIVATE KEY", keyDER},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(f.path, b, 0o600); err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	return ca, nil
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// ClientTLS returns a client configuration that trusts the CA, for
// example a Redis tier's Options.TLS.
func (ca *CA) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
}
