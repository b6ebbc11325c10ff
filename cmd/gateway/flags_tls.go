package main

// Settings of TLS: the certificate of the gateway's listener (tls.go).

func (c *config) tlsFlags(r *registry) {
	r.in(groupTLS)
	t := &c.TLS
	r.string(&t.CertFile, "tls-cert", "", "PEM file of the listener's certificate chain: serve https and wss (with --tls-key); read again when it changes")
	r.string(&t.KeyFile, "tls-key", "", "PEM file of the certificate's private key (with --tls-cert)")
	r.string(&t.ClientCAFile, "tls-client-ca", "", "PEM file of the CAs whose client certificates are accepted: mutual TLS, a client without such a certificate is refused")
	r.duration(&t.ReloadInterval, "tls-reload-interval", defaultTLSReloadInterval, "how often the certificate and key files are checked for a change")
}
