// Anthropic's document content blocks in a Messages request (server/anthropic_request_parts.h):
// a plain-text source (`{"type": "text", "media_type": "text/plain", "data"}`) or a custom
// content source (`{"type": "content", "content": [text blocks]}`), rendered into the user turn
// as Anthropic's long-context guide suggests structuring documents: XML tags around the text and
// its metadata. PDFs (base64), URLs and files need what this server does not have (a PDF reader,
// the network, a file store) and stay a 400 naming the source type.
#include "server/anthropic_request_parts.h"

namespace promptcache::anthropic_request {

namespace {

// Anthropic's error body has no param: the message names the field.
ApiError Refused(const std::string& param, const std::string& what) {
  return Unsupported(param, "'" + param + "': " + what);
}

// A string field (absent or null: nullptr).
MaybeError ReadString(const json& obj, const char* key, const std::string& param,
                      const std::string** out) {
  *out = nullptr;
  const json* v = Find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return WrongType(param + "." + key, "a string", *v);
  *out = &v->get_ref<const std::string&>();
  return std::nullopt;
}

// The document's text from its source.
MaybeError ReadSource(const json& block, const std::string& param, std::string* text) {
  const std::string p = param + ".source";
  const json* source = Find(block, "source");
  if (source == nullptr) return ApiError::BadRequest("'" + p + "' is required", p);
  if (!source->is_object()) return WrongType(p, "an object", *source);
  const json* type = Find(*source, "type");
  if (type == nullptr || !type->is_string()) {
    return ApiError::BadRequest("'" + p + ".type' must be a string", p + ".type");
  }
  if (*type == "text") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*source, p, {"type", "media_type", "data"}));
    const json* media = Find(*source, "media_type");
    if (media != nullptr && *media != "text/plain") {
      return Refused(p + ".media_type", "text document sources of media type " + media->dump() +
                                            " (only \"text/plain\")");
    }
    const std::string* data = nullptr;
    PC_RETURN_IF_API_ERROR(ReadString(*source, "data", p, &data));
    if (data == nullptr) return ApiError::BadRequest("'" + p + ".data' is required", p + ".data");
    *text = *data;
    return std::nullopt;
  }
  if (*type == "content") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*source, p, {"type", "content"}));
    const json* content = Find(*source, "content");
    if (content == nullptr) {
      return ApiError::BadRequest("'" + p + ".content' is required", p + ".content");
    }
    // Each text block is a chunk of the document (for citations): one per line here.
    return json_fields::ReadStringOrObjects(
        *content, p + ".content", "a string or an array of text blocks", "an object (a text block)",
        text, [&](const json& b, const std::string& bp, size_t i) -> MaybeError {
          const json* t = Find(b, "type");
          if (t == nullptr || *t != "text") {
            return Refused(bp + ".type", "document content blocks other than text (" +
                                             (t != nullptr ? t->dump() : "none") + ")");
          }
          PC_RETURN_IF_API_ERROR(OnlyKeys(b, bp, {"type", "text", "cache_control", "citations"}));
          const std::string* chunk = nullptr;
          PC_RETURN_IF_API_ERROR(ReadString(b, "text", bp, &chunk));
          if (chunk == nullptr) {
            return ApiError::BadRequest("'" + bp + ".text' must be a string", bp + ".text");
          }
          *text += (i > 0 ? "\n" : "") + *chunk;
          return std::nullopt;
        });
  }
  return Refused(p + ".type", "document sources of type '" + type->get<std::string>() +
                                  "' (only \"text\" and \"content\")");
}

}  // namespace

MaybeError ReadDocumentBlock(const json& block, const std::string& param, std::string* out) {
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(block, param, {"type", "source", "title", "context", "citations", "cache_control"}));
  if (const json* c = Find(block, "citations")) {
    if (!c->is_object()) return WrongType(param + ".citations", "an object", *c);
    PC_RETURN_IF_API_ERROR(OnlyKeys(*c, param + ".citations", {"enabled"}));
    const json* enabled = Find(*c, "enabled");
    if (enabled != nullptr && !enabled->is_boolean()) {
      return WrongType(param + ".citations.enabled", "a boolean", *enabled);
    }
    // A client that asks for citations reads them from the answer: this server writes none.
    if (enabled != nullptr && enabled->get<bool>()) {
      return Refused(param + ".citations.enabled",
                     "citations (this server answers no citation blocks)");
    }
  }
  const std::string *title = nullptr, *context = nullptr;
  PC_RETURN_IF_API_ERROR(ReadString(block, "title", param, &title));
  PC_RETURN_IF_API_ERROR(ReadString(block, "context", param, &context));
  std::string text;
  PC_RETURN_IF_API_ERROR(ReadSource(block, param, &text));
  std::string& r = *out;
  r += "<document>\n";
  if (title != nullptr) r += "<source>" + *title + "</source>\n";
  if (context != nullptr) r += "<document_context>" + *context + "</document_context>\n";
  r += "<document_content>\n" + text + "\n</document_content>\n</document>\n";
  return std::nullopt;
}

}  // namespace promptcache::anthropic_request
