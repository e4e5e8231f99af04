// SentencePieceModel (sentencepiece_model.h). No Abseil header may be
// included here (see the header); kept out of unity batches. The library is
// opened at run time (Lib() says why); its header only declares the classes.
#include "common/tokenizer/sentencepiece_model.h"

#include <cstdlib>
#include <new>

#ifdef MESHSERVE_HAVE_SENTENCEPIECE
#include <dlfcn.h>
#include <sentencepiece_processor.h>
#else
namespace sentencepiece {
class SentencePieceProcessor {};  // never made: only destroyed (null)
}  // namespace sentencepiece
#endif

namespace meshserve {
namespace tokenizer {

#ifdef MESHSERVE_HAVE_SENTENCEPIECE

namespace {

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0xNN>" -> NN; -1 when the piece is not of that form.
int ByteOfPiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  char* end = nullptr;
  const std::string hex = piece.substr(3, 2);
  const long value = std::strtol(hex.c_str(), &end, 16);
  if (end != hex.c_str() + 2) return -1;
  return static_cast<int>(value);
}

// libsentencepiece, opened once with dlopen (see below). Its processor's
// methods are virtual (called through the vtable, no symbol needed); the
// constructor and Status's destructor and ToString are looked up by name.
struct Library {
  void* handle = nullptr;
  std::string error;  // empty when loaded
  void (*construct)(void*) = nullptr;                 // SentencePieceProcessor()
  void (*destroy_status)(void*) = nullptr;            // util::Status::~Status()
  std::string (*status_string)(const void*) = nullptr;  // util::Status::ToString()
};

// Why dlopen and RTLD_DEEPBIND: Debian's libsentencepiece carries its own
// copy of protobuf-lite 3.14 and exports its symbols; linked into a process
// that also links libprotobuf 3.21 (every meshserve server), its model parser
// binds to the wrong copy and aborts ("compiled against version 3.14.0").
// Opened RTLD_LOCAL | RTLD_DEEPBIND, the library binds to its own copy and
// adds nothing to the process's global symbols. AddressSanitizer refuses
// RTLD_DEEPBIND: sanitizer builds open it without (fine in a process without
// libprotobuf, such as the tokenizer tests).
const Library& Lib() {
  static const Library* lib = [] {
    auto* l = new Library();
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if defined(__has_feature)
#if !__has_feature(address_sanitizer) && !__has_feature(thread_sanitizer)
    flags |= RTLD_DEEPBIND;
#endif
#else
    flags |= RTLD_DEEPBIND;
#endif
#endif
    l->handle = dlopen("libsentencepiece.so.0", flags);
    if (l->handle == nullptr) {
      const char* why = dlerror();
      l->error = std::string("cannot open libsentencepiece.so.0: ") + (why ? why : "?");
      return l;
    }
    l->construct = reinterpret_cast<void (*)(void*)>(
        dlsym(l->handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    l->destroy_status = reinterpret_cast<void (*)(void*)>(
        dlsym(l->handle, "_ZN13sentencepiece4util6StatusD1Ev"));
    l->status_string = reinterpret_cast<std::string (*)(const void*)>(
        dlsym(l->handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
    if (l->construct == nullptr || l->destroy_status == nullptr || l->status_string == nullptr) {
      l->error = "libsentencepiece.so.0 lacks the SentencePieceProcessor symbols meshserve uses";
    }
    return l;
  }();
  return *lib;
}

// A util::Status returned by the library, destroyed through the library
// (its destructor is not linked in).
class StatusHolder {
 public:
  template <typename Call>
  explicit StatusHolder(Call call) {
    new (storage_) Status(call());
  }
  ~StatusHolder() { Lib().destroy_status(storage_); }
  StatusHolder(const StatusHolder&) = delete;
  StatusHolder& operator=(const StatusHolder&) = delete;
  bool ok() const { return get().ok(); }
  std::string ToString() const { return Lib().status_string(storage_); }

 private:
  const Status& get() const { return *reinterpret_cast<const Status*>(storage_); }
  alignas(Status) unsigned char storage_[sizeof(Status)];
};

}  // namespace

bool SentencePieceModel::Available() { return Lib().error.empty(); }
std::string SentencePieceModel::Unavailable() { return Lib().error; }

SentencePieceModel::SentencePieceModel() = default;

SentencePieceModel::~SentencePieceModel() {
  // Made by the library's constructor in our storage: destroyed in place
  // (the destructor is virtual), the storage freed here.
  SentencePieceProcessor* sp = sp_.release();
  if (sp != nullptr) {
    sp->~SentencePieceProcessor();
    ::operator delete(static_cast<void*>(sp));
  }
}

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  if (!Lib().error.empty()) {
    *error = Lib().error;
    return nullptr;
  }
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  void* storage = ::operator new(sizeof(SentencePieceProcessor));
  Lib().construct(storage);
  model->sp_.reset(static_cast<SentencePieceProcessor*>(storage));
  SentencePieceProcessor* sp = model->sp_.get();
  StatusHolder status([&] { return sp->Load(path); });
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  if (sp->GetPieceSize() <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids,
                                std::string* error) const {
  const SentencePieceProcessor* sp = sp_.get();
  StatusHolder status([&] { return sp->Encode(text, ids); });
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

std::string SentencePieceModel::DecodeText(const std::vector<int>& ids) const {
  const SentencePieceProcessor* sp = sp_.get();
  std::string text;
  StatusHolder status([&] { return sp->Decode(ids, &text); });
  return status.ok() ? text : "";
}

std::string SentencePieceModel::PieceBytes(int id) const {
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    const int byte = ByteOfPiece(piece);
    return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
  }
  if (IsSpecial(id)) return piece;
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, kSpaceSymbol) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int SentencePieceModel::piece_size() const { return sp_->GetPieceSize(); }
int SentencePieceModel::bos_id() const { return sp_->bos_id(); }
int SentencePieceModel::eos_id() const { return sp_->eos_id(); }
bool SentencePieceModel::IsSpecial(int id) const {
  return sp_->IsControl(id) || sp_->IsUnknown(id);
}
int SentencePieceModel::PieceToId(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  return id >= 0 && id < sp_->GetPieceSize() && sp_->IdToPiece(id) == piece ? id : -1;
}

#else  // !MESHSERVE_HAVE_SENTENCEPIECE

// Built without libsentencepiece: nothing loads.
bool SentencePieceModel::Available() { return false; }
std::string SentencePieceModel::Unavailable() {
  return "meshserve was built without libsentencepiece (install libsentencepiece-dev and "
         "rebuild)";
}
SentencePieceModel::SentencePieceModel() = default;
SentencePieceModel::~SentencePieceModel() = default;
std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string&,
                                                             std::string* error) {
  *error = "meshserve was built without libsentencepiece";
  return nullptr;
}
bool SentencePieceModel::Encode(const std::string&, std::vector<int>*, std::string* error) const {
  *error = "meshserve was built without libsentencepiece";
  return false;
}
std::string SentencePieceModel::DecodeText(const std::vector<int>&) const { return ""; }
std::string SentencePieceModel::PieceBytes(int) const { return ""; }
int SentencePieceModel::piece_size() const { return 0; }
int SentencePieceModel::bos_id() const { return -1; }
int SentencePieceModel::eos_id() const { return -1; }
bool SentencePieceModel::IsSpecial(int) const { return false; }
int SentencePieceModel::PieceToId(const std::string&) const { return -1; }

#endif  // MESHSERVE_HAVE_SENTENCEPIECE

}  // namespace tokenizer
}  // namespace meshserve
