// Placeholder: replaced by the reference implementation.
#include "cpu/reference.h"
#include "flashgate/error.h"
namespace flashgate::cpu {
void attention_forward(const ForwardArgs&, const detail::AttentionProblem&) { throw Error(ErrorKind::unsupported, "", "not yet"); }
void attention_backward(const BackwardArgs&, const detail::AttentionProblem&) { throw Error(ErrorKind::unsupported, "", "not yet"); }
void decode(const DecodeArgs&, const detail::DecodeProblem&) { throw Error(ErrorKind::unsupported, "", "not yet"); }
void paged_attention(const PagedArgs&, const detail::PagedProblem&) { throw Error(ErrorKind::unsupported, "", "not yet"); }
}
