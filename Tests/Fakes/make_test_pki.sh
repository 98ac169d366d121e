#!/usr/bin/env bash
# Makes a test CA, a loopback server certificate signed by it, an APNs-style
# EC P-256 .p8 key and an RSA service-account key, in DIR. openssl CLI only.
set -euo pipefail
dir=$1
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=topicstore test CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out apns.p8 2>/dev/null
openssl pkey -in apns.p8 -pubout -out apns_pub.pem
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out fcm.key 2>/dev/null
openssl pkey -in fcm.key -pubout -out fcm_pub.pem
