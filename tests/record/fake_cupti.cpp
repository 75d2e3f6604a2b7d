// A stand-in for libcupti.so with just what the recorder calls, and one more entry point,
// fake_cupti_deliver, through which a test program plays the CUDA driver: it hands the
// subscriber a callback as CUPTI would, if that callback is enabled. The device of a context
// is the context's value (a test passes (CUcontext)1 for device 1). FAKE_CUPTI_REFUSE=1 makes
// the subscription fail, as when a profiler holds CUPTI.
#include <cupti_callbacks.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace {

std::atomic<CUpti_CallbackFunc> subscriber{nullptr};
void* subscriber_data = nullptr;
std::array<std::array<std::atomic<bool>, 1024>, CUPTI_CB_DOMAIN_SIZE> enabled{};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* handle,
                                                                   CUpti_CallbackFunc callback, void* data) {
  const char* refuse = std::getenv("FAKE_CUPTI_REFUSE");
  if ((refuse != nullptr && *refuse == '1') || subscriber.load() != nullptr)
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  subscriber_data = data;
  subscriber.store(callback);
  *handle = reinterpret_cast<CUpti_SubscriberHandle>(uintptr_t{1});
  return CUPTI_SUCCESS;
}

__attribute__((visibility("default"))) CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle) {
  subscriber.store(nullptr);
  return CUPTI_SUCCESS;
}

__attribute__((visibility("default"))) CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle,
                                                                       CUpti_CallbackDomain domain,
                                                                       CUpti_CallbackId id) {
  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE || id >= 1024)
    return CUPTI_ERROR_INVALID_PARAMETER;
  enabled[domain][id].store(enable != 0);
  return CUPTI_SUCCESS;
}

__attribute__((visibility("default"))) CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR_FAKE";
  return CUPTI_SUCCESS;
}

__attribute__((visibility("default"))) CUptiResult cuptiGetDeviceId(CUcontext context, uint32_t* device) {
  *device = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(context));
  return CUPTI_SUCCESS;
}

__attribute__((visibility("default"))) void fake_cupti_deliver(CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                                               CUpti_ApiCallbackSite site, const void* params,
                                                               void* result, CUcontext context) {
  const CUpti_CallbackFunc callback = subscriber.load();
  if (callback == nullptr || domain >= CUPTI_CB_DOMAIN_SIZE || id >= 1024 || !enabled[domain][id].load()) return;
  CUpti_CallbackData data{};
  data.callbackSite = site;
  data.functionParams = params;
  data.functionReturnValue = result;
  data.context = context;
  callback(subscriber_data, domain, id, &data);
}

}  // extern "C"
