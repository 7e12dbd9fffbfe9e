// S3 requests through libcurl (src/io/s3_client.hpp).
#include "io/s3_client.hpp"

#include <curl/curl.h>
#include <expat.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <unistd.h>

#include "core/unique_handle.hpp"
#include "ctforge/error.hpp"
#include "io/object_store.hpp"

namespace ctforge::io::s3 {
namespace {

namespace fs = std::filesystem;

struct curl_traits {
  using handle_type = CURL*;
  static CURL* null() noexcept { return nullptr; }
  static void release(CURL* c) noexcept { curl_easy_cleanup(c); }
};
struct slist_traits {
  using handle_type = curl_slist*;
  static curl_slist* null() noexcept { return nullptr; }
  static void release(curl_slist* l) noexcept { curl_slist_free_all(l); }
};
struct file_traits {
  using handle_type = std::FILE*;
  static std::FILE* null() noexcept { return nullptr; }
  static void release(std::FILE* f) noexcept { std::fclose(f); }
};
using curl_handle = detail::unique_handle<curl_traits>;
using header_list = detail::unique_handle<slist_traits>;
using file_handle = detail::unique_handle<file_traits>;

/// Every byte outside RFC 3986's unreserved set percent-encoded (query values, as SigV4 wants).
std::string encode_query(std::string_view v) {
  std::string out;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += ch;
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

/// The text of every element of an XML answer, by element name (S3's answers are shallow).
std::multimap<std::string, std::string> xml_texts(const std::string& xml) {
  struct state {
    std::multimap<std::string, std::string> out;
    std::string name, text;
  } st;
  XML_Parser parser = XML_ParserCreate(nullptr);
  if (!parser) return {};
  XML_SetUserData(parser, &st);
  XML_SetElementHandler(
      parser,
      [](void* u, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<state*>(u);
        s->name = name;
        s->text.clear();
      },
      [](void* u, const XML_Char* name) {
        auto* s = static_cast<state*>(u);
        if (s->name == name) s->out.emplace(s->name, s->text);
        s->name.clear();
      });
  XML_SetCharacterDataHandler(parser, [](void* u, const XML_Char* t, int n) {
    auto* s = static_cast<state*>(u);
    if (!s->name.empty()) s->text.append(t, static_cast<std::size_t>(n));
  });
  const bool ok = XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), 1) != XML_STATUS_ERROR;
  XML_ParserFree(parser);
  return ok ? std::move(st.out) : std::multimap<std::string, std::string>{};
}

std::string first(const std::multimap<std::string, std::string>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    CTFORGE_CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK, "curl_global_init failed");
  });
}

/// What a request sends: nothing, text, or bytes [offset, offset + size) of a file.
struct body {
  std::string_view text;
  std::FILE* file = nullptr;
  std::int64_t offset = 0, size = 0;
  bool upload = false;  ///< PUT with this body (else GET/HEAD/DELETE/POST by `method`)
};

/// What came back: the status, the answer's text (or it went to `sink`), the ETag header.
struct answer {
  long status = 0;
  std::string text, etag, region;  ///< region: x-amz-bucket-region (a bucket in another region)
  std::FILE* sink = nullptr;  ///< a 2xx answer's bytes go here when set
};

std::size_t on_write(char* p, std::size_t, std::size_t n, void* u) {
  auto* a = static_cast<answer*>(u);
  if (a->sink && a->status / 100 == 2) return std::fwrite(p, 1, n, a->sink);
  if (a->text.size() < (1u << 20)) a->text.append(p, n);
  return n;
}

/// The value of header `name` (case-insensitive) in the header line `h`, trimmed; empty else.
std::string header_value(std::string_view h, std::string_view name) {
  if (h.size() <= name.size() || h[name.size()] != ':') return {};
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != name[i]) return {};
  std::string v(h.substr(name.size() + 1));
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.erase(v.begin());
  return v;
}

std::size_t on_header(char* p, std::size_t, std::size_t n, void* u) {
  auto* a = static_cast<answer*>(u);
  const std::string_view h(p, n);
  if (h.starts_with("HTTP/")) {  // the status line: where the body goes depends on it
    const auto sp = h.find(' ');
    if (sp != std::string_view::npos) a->status = std::atol(std::string(h.substr(sp + 1, 3)).c_str());
  }
  if (std::string v = header_value(h, "etag"); !v.empty()) a->etag = std::move(v);
  if (std::string v = header_value(h, "x-amz-bucket-region"); !v.empty()) a->region = std::move(v);
  return n;
}

/// Whether a request that failed so may succeed when sent again: the store busy or failing
/// (5xx, 429 SlowDown, 400 RequestTimeout) or the network interrupted; not a wrong address,
/// a refused certificate or a local disk that is full.
bool transient(CURLcode rc, const answer& a) {
  switch (rc) {
    case CURLE_OK:
      return a.status >= 500 || a.status == 429 ||
             (a.status == 400 && a.text.find("<Code>RequestTimeout</Code>") != std::string::npos);
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

std::size_t on_read(char* p, std::size_t size, std::size_t n, void* u) {
  auto* b = static_cast<body*>(u);
  const std::size_t want = std::min<std::size_t>(size * n, static_cast<std::size_t>(b->size));
  std::size_t got = 0;
  if (b->file) {
    got = std::fread(p, 1, want, b->file);
    if (got < want && std::ferror(b->file)) return CURL_READFUNC_ABORT;
  } else {
    std::copy_n(b->text.data(), want, p);
    b->text.remove_prefix(want);
    got = want;
  }
  b->size -= static_cast<std::int64_t>(got);
  return got;
}

}  // namespace

constexpr std::int64_t k_max_part = std::int64_t{5} << 30;  ///< S3's largest part (5 GiB)

std::int64_t part_size() {
  constexpr std::int64_t mib = 1 << 20;
  const char* v = std::getenv("CTFORGE_S3_PART_SIZE");
  if (!v || !*v) return 64 * mib;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  CTFORGE_EXPECTS(end && *end == '\0' && n >= 5 * mib && n <= k_max_part,
                  fmt::format("CTFORGE_S3_PART_SIZE: expected a whole number of bytes from 5 MiB "
                              "({}) to 5 GiB ({}), got '{}'",
                              5 * mib, k_max_part, v));
  return n;
}

struct client::impl {
  static constexpr int k_tries = 5;  ///< 0.25, 0.5, 1 and 2 s apart (+ up to half of that)
  curl_handle curl;

  /// One request, retried on 5xx and network errors; returns the answer of the last try.
  answer send(const char* method, const std::string& s3_url, const std::string& http_url,
              body b, std::FILE* sink = nullptr, const std::string& content_type = {}) {
    answer a;
    for (int attempt = 0;; ++attempt) {
      a = answer{};
      a.sink = sink;
      if (sink) {
        std::rewind(sink);
        CTFORGE_CHECK(::ftruncate(fileno(sink), 0) == 0, s3_url + ": cannot truncate the download");
      }
      if (b.file) ::fseeko(b.file, static_cast<off_t>(b.offset), SEEK_SET);
      body left = b;
      char reason[CURL_ERROR_SIZE] = {0};
      const CURLcode rc = perform(method, s3_url, http_url, left, a, reason, content_type);
      if (!transient(rc, a) || attempt + 1 == k_tries) {
        if (rc != CURLE_OK)
          CTFORGE_FAIL(fmt::format("{}: {} {}: {} ({})", s3_url, method, http_url,
                                   *reason ? reason : curl_easy_strerror(rc), "libcurl"));
        return a;
      }
      // Exponential backoff with jitter (many writers backing off together do not meet again).
      const int base = 250 << attempt;
      thread_local std::minstd_rand jitter(std::random_device{}());
      std::this_thread::sleep_for(
          std::chrono::milliseconds(base + static_cast<int>(jitter() % (base / 2 + 1))));
    }
  }

  CURLcode perform(const char* method, const std::string& s3_url, const std::string& http_url,
                   body& b, answer& a, char* reason, const std::string& content_type) {
    const s3_object o = resolve_s3_object(s3_url);
    CURL* c = curl.get();
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, http_url.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, reason);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled transfer: 60 s without a byte
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    header_list headers(curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD"));
    const auto add = [&](const std::string& h) {
      curl_slist* l = curl_slist_append(headers.get(), h.c_str());
      CTFORGE_CHECK(l, "curl_slist_append failed");
      headers.release();
      headers.reset(l);
    };
    if (!content_type.empty()) add("Content-Type: " + content_type);
    const bool signed_request = !o.key_id.empty() && !o.secret.empty();
    if (signed_request) {
      const std::string sig = "aws:amz:" + o.region + ":s3";
      curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sig.c_str());  // copied by libcurl
      curl_easy_setopt(c, CURLOPT_USERNAME, o.key_id.c_str());
      curl_easy_setopt(c, CURLOPT_PASSWORD, o.secret.c_str());
      if (!o.token.empty()) add("x-amz-security-token: " + o.token);
    }
    const std::string_view m(method);
    if (b.upload) {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, &b);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(b.size));
    } else if (m == "POST") {
      curl_easy_setopt(c, CURLOPT_POST, 1L);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, b.text.data());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(b.text.size()));
    } else if (m == "HEAD") {
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (m != "GET") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
    return rc;
  }

  /// error naming the request and the store's answer (for a status that is not 2xx).
  [[noreturn]] static void refused(const char* method, const std::string& s3_url,
                                   const std::string& http_url, const answer& a) {
    const auto x = xml_texts(a.text);
    const std::string code = first(x, "Code"), message = first(x, "Message");
    const s3_object o = resolve_s3_object(s3_url);
    std::string hint;
    if (a.status != 404 && (o.key_id.empty() || o.secret.empty()))
      hint = " (the request was unsigned: no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)";
    else if (a.status == 403 && code.empty())
      hint = " (no such object, or no permission to read it)";
    if (!a.region.empty() && a.region != o.region)
      hint += fmt::format(" (the bucket is in region {}, not {}: set AWS_REGION={})", a.region,
                          o.region, a.region);
    if (code == "NoSuchBucket") hint = fmt::format(" (no bucket '{}' at {})", o.bucket, o.bucket_url);
    CTFORGE_FAIL(fmt::format("{}: {} {}: HTTP {}{}{}{}", s3_url, method, http_url, a.status,
                             code.empty() ? "" : " " + code, message.empty() ? "" : ": " + message,
                             hint));
  }

  answer ok(const char* method, const std::string& s3_url, const std::string& http_url, body b,
            std::FILE* sink = nullptr, const std::string& content_type = {}) {
    answer a = send(method, s3_url, http_url, b, sink, content_type);
    if (a.status / 100 != 2) refused(method, s3_url, http_url, a);
    return a;
  }

  /// HEAD: the object's size (-1 when there is none) and ETag; `unreadable` (when given) says
  /// whether the store refused to say (403: no permission to read, e.g. write-only
  /// credentials).
  object_info head(const std::string& url, bool* unreadable = nullptr) {
    const s3_object o = resolve_s3_object(url);
    const answer a = send("HEAD", url, o.url, body{});
    if (a.status == 404) return {};
    if (a.status == 403 && unreadable) {
      *unreadable = true;
      return {};
    }
    if (a.status / 100 != 2) refused("HEAD", url, o.url, a);
    curl_off_t n = -1;
    curl_easy_getinfo(curl.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &n);
    CTFORGE_CHECK(n >= 0, fmt::format("{}: HEAD {}: the answer gives no Content-Length", url, o.url));
    return {static_cast<std::int64_t>(n), a.etag};
  }
  std::int64_t size(const std::string& url, bool* unreadable = nullptr) {
    return head(url, unreadable).size;
  }

  void put_part(const std::string& url, const std::string& http_url, std::FILE* f,
                std::int64_t offset, std::int64_t n, answer* out = nullptr) {
    body b;
    b.file = f;
    b.offset = offset;
    b.size = n;
    b.upload = true;
    answer a = ok("PUT", url, http_url, b);
    if (out) *out = std::move(a);
  }

  void multipart(const std::string& url, const std::string& file, std::FILE* f,
                 std::int64_t total, std::int64_t part) {
    const s3_object o = resolve_s3_object(url);
    const answer start = ok("POST", url, o.url + "?uploads=", body{}, nullptr, "application/xml");
    const std::string id = first(xml_texts(start.text), "UploadId");
    CTFORGE_CHECK(!id.empty(), fmt::format("{}: POST {}?uploads: the answer names no UploadId: {}",
                                           url, o.url, start.text.substr(0, 300)));
    const std::string base = o.url + "?uploadId=" + encode_query(id);
    try {
      std::string done = "<CompleteMultipartUpload>";
      for (std::int64_t k = 0, off = 0; off < total; ++k, off += part) {
        answer a;
        put_part(url, fmt::format("{}?partNumber={}&uploadId={}", o.url, k + 1, encode_query(id)),
                 f, off, std::min(part, total - off), &a);
        CTFORGE_CHECK(!a.etag.empty(), fmt::format("{}: part {} of {}: the store returned no ETag",
                                                   url, k + 1, file));
        done += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", k + 1, a.etag);
      }
      done += "</CompleteMultipartUpload>";
      body b;
      b.text = done;
      const answer a = send("POST", url, base, b, nullptr, "application/xml");
      // A completion sent again after its answer was lost finds no upload any more: done if
      // the object is there whole (put_file checks its size after this).
      const auto x = xml_texts(a.text);
      if (first(x, "Code") == "NoSuchUpload" && size(url) == total) return;
      if (a.status / 100 != 2) refused("POST", url, base, a);
      // S3 may answer 200 and still fail the completion: the body is then an <Error>.
      if (!first(x, "Code").empty()) {
        answer failed = a;
        failed.status = 500;
        refused("POST", url, base, failed);
      }
    } catch (...) {
      try {
        send("DELETE", url, base, body{});
      } catch (...) {  // the error that matters is the first one
      }
      throw;
    }
  }
};

client::client() : p_(std::make_unique<impl>()) {
  init_curl_once();
  p_->curl.reset(curl_easy_init());
  CTFORGE_CHECK(p_->curl, "curl_easy_init failed");
}
client::~client() = default;
client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;

std::int64_t client::size(const std::string& url) { return p_->size(url); }
object_info client::info(const std::string& url) { return p_->head(url); }

void client::get_file(const std::string& url, const std::string& file) {
  const s3_object o = resolve_s3_object(url);
  file_handle f(std::fopen(file.c_str(), "w+b"));
  CTFORGE_CHECK(f, fmt::format("{}: cannot create {}", url, file));
  p_->ok("GET", url, o.url, body{}, f.get());
  CTFORGE_CHECK(std::fflush(f.get()) == 0 && !std::ferror(f.get()),
                fmt::format("{}: writing {} failed (disk full?)", url, file));
}

void client::put_file(const std::string& url, const std::string& file) {
  std::error_code ec;
  const auto total = static_cast<std::int64_t>(fs::file_size(file, ec));
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot read {}: {}", url, file, ec.message()));
  file_handle f(std::fopen(file.c_str(), "rb"));
  CTFORGE_CHECK(f, fmt::format("{}: cannot open {}", url, file));
  // At most 10000 parts: larger ones for a file beyond 10000 times the part size.
  const std::int64_t part = std::max(part_size(), (total + 9999) / 10000);
  CTFORGE_CHECK(part <= k_max_part,
                fmt::format("{}: {} has {} bytes, more than S3 stores in one object", url, file,
                            total));
  if (total <= part)
    p_->put_part(url, resolve_s3_object(url).url, f.get(), 0, total);
  else
    p_->multipart(url, file, f.get(), total, part);
  // Checked as the store has it; credentials that may write but not read leave it unchecked.
  bool unreadable = false;
  const std::int64_t stored = p_->size(url, &unreadable);
  CTFORGE_CHECK(unreadable || stored == total,
                fmt::format("{}: stored {} bytes of {}'s {}", url, stored, file, total));
}

void client::put_text(const std::string& url, std::string_view text) {
  body b;
  b.text = text;
  b.size = static_cast<std::int64_t>(text.size());
  b.upload = true;
  p_->ok("PUT", url, resolve_s3_object(url).url, b);
}

std::vector<std::string> client::list(const std::string& prefix_url) {
  const s3_object o = resolve_s3_object(prefix_url);
  std::vector<std::string> urls;
  std::string token;
  while (true) {
    std::string q = o.bucket_url + "?list-type=2&prefix=" + encode_query(o.key);
    if (!token.empty()) q = o.bucket_url + "?continuation-token=" + encode_query(token) +
                            "&list-type=2&prefix=" + encode_query(o.key);
    const auto x = xml_texts(p_->ok("GET", prefix_url, q, body{}).text);
    for (auto [it, end] = x.equal_range("Key"); it != end; ++it)
      urls.push_back(fmt::format("s3://{}/{}", o.bucket, it->second));
    token = first(x, "NextContinuationToken");
    if (first(x, "IsTruncated") != "true" || token.empty()) break;
  }
  return urls;
}

void client::remove(const std::string& url) {
  const s3_object o = resolve_s3_object(url);
  const answer a = p_->send("DELETE", url, o.url, body{});
  if (a.status / 100 != 2 && a.status != 404) impl::refused("DELETE", url, o.url, a);
}

}  // namespace ctforge::io::s3
