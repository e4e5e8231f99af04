#include "common/metrics/http_endpoint.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"

namespace meshserve {
namespace {

// OpenSSL's latest error, and clears the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Status CheckReadable(const std::string& path, absl::string_view what) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", what, " file ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::fclose(file);
  return absl::OkStatus();
}

// An encrypted key fails to load instead of prompting on the terminal.
int NoPassword(char*, int, int, void*) { return 0; }

// `files`' chain and key into `ctx` (see HttpEndpoint::Create for the errors).
absl::Status ConfigureTls(SSL_CTX* ctx, const HttpsFiles& files) {
  ERR_clear_error();
  MS_RETURN_IF_ERROR(CheckReadable(files.cert_file, "certificate"));
  MS_RETURN_IF_ERROR(CheckReadable(files.key_file, "key"));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(ctx, NoPassword);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);  // no client certificate asked
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("TLS certificate file ", files.cert_file,
                                                   ": no PEM certificate (", OpenSslError(),
                                                   ")"));
  }
  BIO* bio = BIO_new_file(files.key_file.c_str(), "r");
  EVP_PKEY* key = bio == nullptr ? nullptr : PEM_read_bio_PrivateKey(bio, nullptr, NoPassword,
                                                                     nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("TLS key file ", files.key_file,
                                                   ": no unencrypted PEM private key (",
                                                   OpenSslError(), ")"));
  }
  const bool matches = X509_check_private_key(SSL_CTX_get0_certificate(ctx), key) == 1;
  const bool used = matches && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);  // the context holds its own reference
  if (!matches) {
    return absl::FailedPreconditionError(
        absl::StrCat("TLS key file ", files.key_file, " is not the key of certificate file ",
                     files.cert_file, " (", OpenSslError(), ")"));
  }
  if (!used) {
    return absl::InvalidArgumentError(absl::StrCat("TLS key file ", files.key_file,
                                                   ": cannot use it (", OpenSslError(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckHttpsFiles(const HttpsFiles& files) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("HTTPS: OpenSSL cannot make a TLS context");
  absl::Status configured = ConfigureTls(ctx, files);
  SSL_CTX_free(ctx);
  return configured;
}

HttpEndpoint::HttpEndpoint(const MetricRegistry* registry, std::function<void()> before_scrape)
    : HttpEndpoint(registry, std::move(before_scrape), std::make_unique<httplib::Server>(),
                   /*https=*/false) {}

HttpEndpoint::HttpEndpoint(const MetricRegistry* registry, std::function<void()> before_scrape,
                           std::unique_ptr<httplib::Server> server, bool https)
    : registry_(registry),
      before_scrape_(std::move(before_scrape)),
      server_(std::move(server)),
      https_(https) {
  // cpp-httplib's default also sets SO_REUSEPORT, which would let a second
  // server bind a port already in use: keep SO_REUSEADDR only.
  // The hook runs on each socket cpp-httplib tries, before its bind; the
  // last one is the socket that was bound.
  server_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket_ = sock;
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (before_scrape_) before_scrape_();
    res.set_content(registry_->Exposition(), kPrometheusContentType);
  });
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Create(
    const MetricRegistry* registry, const std::optional<HttpsFiles>& https,
    std::function<void()> before_scrape) {
  if (!https.has_value()) {
    return std::unique_ptr<HttpEndpoint>(new HttpEndpoint(registry, std::move(before_scrape)));
  }
  absl::Status configured = absl::InternalError("HTTPS: OpenSSL cannot make a TLS context");
  auto server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
    configured = ConfigureTls(&ctx, *https);
    return configured.ok();
  });
  if (!configured.ok()) return configured;
  if (!server->is_valid()) {
    return absl::InternalError(absl::StrCat("HTTPS: no TLS context for ", https->cert_file));
  }
  // SSL_write on a connection the client closed raises SIGPIPE (plaintext
  // writes use MSG_NOSIGNAL); it must not end the server.
  std::signal(SIGPIPE, SIG_IGN);
  return std::unique_ptr<HttpEndpoint>(
      new HttpEndpoint(registry, std::move(before_scrape), std::move(server), /*https=*/true));
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

absl::Status HttpEndpoint::Start(const std::string& host, int port) {
  const bool bound = port == 0 ? (port_ = server_->bind_to_any_port(host)) > 0
                               : server_->bind_to_port(host, port);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", host, ":", port));
  }
  if (port != 0) port_ = port;
  // listen() again on a listening socket only changes its backlog.
  if (listen_socket_ >= 0 && ::listen(listen_socket_, kListenBacklog) != 0) {
    return absl::InternalError(absl::StrCat("HTTP: ", host, ":", port_, ": listen backlog ",
                                            kListenBacklog, ": ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() before the listener runs would be lost (and Stop's join would
  // hang): return once it runs.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!server_->is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return server_->is_running() ? absl::OkStatus()
                               : absl::InternalError(absl::StrCat("HTTP: ", host, ":", port_,
                                                                  " bound but not listening"));
}

absl::StatusOr<int> HttpEndpoint::ListenBacklog() const {
  if (listen_socket_ < 0 || port_ == 0) {
    return absl::FailedPreconditionError("HTTP endpoint not started");
  }
  // For a listening socket the kernel reports the backlog limit in
  // tcpi_sacked (and the queue's current length in tcpi_unacked).
  tcp_info info{};
  socklen_t size = sizeof(info);
  if (getsockopt(listen_socket_, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
      info.tcpi_state != TCP_LISTEN) {
    return absl::InternalError(absl::StrCat("HTTP: no TCP_INFO for the listening socket: ",
                                            std::strerror(errno)));
  }
  return static_cast<int>(info.tcpi_sacked);
}

void HttpEndpoint::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace meshserve
