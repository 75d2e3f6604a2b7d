// Python frames read without the GIL, in an interpreter embedded in this test: they name the
// functions, files and lines that Python's own traceback module names, from the thread that
// asks, with one run boundary per C++ frame of the evaluation loop; lines come from memsnap's
// reading of the location table.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "history/interpreter_frames.h"
#include "history/stack_capture.h"
#include "history/symbolizer.h"
#include "python/native/code_locations.h"
#include "python/native/python_frames.h"

namespace python_frames_test {

using memsnap::python::PythonFrames;

PythonFrames* g_frames = nullptr;

// What one capture saw: the resolved frames (innermost first), run ends, how many C++
// frames of the evaluation loop were on the stack at that moment, and the C++ walk whole and
// ended at the evaluation loop's code.
struct Capture {
  std::vector<memsnap::SourceFrame> frames;
  size_t run_ends = 0;
  size_t loop_frames = 0;
  std::vector<uintptr_t> cpp;
  std::vector<uintptr_t> cpp_to_loop;
};
std::vector<Capture> g_captures;

// memsnap_test.capture(): called from Python; captures with the GIL released, as an allocation
// made by PyTorch does. Returns the capture's index.
PyObject* capture(PyObject*, PyObject*) {
  Capture taken;
  uintptr_t tokens[memsnap::kMaxInterpreterTokens];
  uintptr_t cpp[memsnap::kMaxStackDepth];
  uintptr_t to_loop[memsnap::kMaxStackDepth];
  size_t count = 0, cpp_count = 0, to_loop_count = 0;
  Py_BEGIN_ALLOW_THREADS
  count = g_frames->capture(tokens, memsnap::kMaxInterpreterTokens);
  cpp_count = memsnap::capture_stack(cpp, memsnap::kMaxStackDepth);
  to_loop_count = memsnap::capture_stack(to_loop, memsnap::kMaxStackDepth, 0, nullptr,
                                         g_frames->evaluation_loop_code());
  Py_END_ALLOW_THREADS
  taken.cpp.assign(cpp, cpp + cpp_count);
  taken.cpp_to_loop.assign(to_loop, to_loop + to_loop_count);
  for (size_t i = 0; i < count; ++i) {
    if (memsnap::is_interpreter_frame(tokens[i]))
      taken.frames.push_back(g_frames->resolve(tokens[i]));
    else
      ++taken.run_ends;
  }
  for (size_t i = 0; i < cpp_count; ++i)
    for (const memsnap::SourceFrame& frame : memsnap::process_symbolizer().frames_at(cpp[i]))
      taken.loop_frames += g_frames->is_evaluation_loop(frame.function);
  g_captures.push_back(std::move(taken));
  return PyLong_FromSize_t(g_captures.size() - 1);
}

// memsnap_test.line_check(code): compares memsnap's line for every instruction of a code
// object (and the code objects nested in it) with what co_positions() says; returns the
// number of instructions checked, or raises on the first difference.
PyObject* line_check(PyObject*, PyObject* code) {
  PyObject* result = PyRun_String(
      "def _walk(c):\n"
      "    out = [(c.co_linetable, c.co_firstlineno, [p[0] for p in c.co_positions()], c.co_name)]\n"
      "    for k in c.co_consts:\n"
      "        if hasattr(k, 'co_linetable'): out += _walk(k)\n"
      "    return out\n",
      Py_file_input, PyEval_GetGlobals(), PyEval_GetGlobals());
  if (result == nullptr) return nullptr;
  Py_DECREF(result);
  PyObject* walk = PyDict_GetItemString(PyEval_GetGlobals(), "_walk");
  PyObject* items = PyObject_CallOneArg(walk, code);
  if (items == nullptr) return nullptr;
  long checked = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); ++i) {
    PyObject* item = PyList_GET_ITEM(items, i);
    PyObject* table = PyTuple_GET_ITEM(item, 0);
    const int first_line = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(item, 1)));
    PyObject* lines = PyTuple_GET_ITEM(item, 2);
    const std::string_view bytes(PyBytes_AS_STRING(table), static_cast<size_t>(PyBytes_GET_SIZE(table)));
    for (Py_ssize_t at = 0; at < PyList_GET_SIZE(lines); ++at) {
      PyObject* expected = PyList_GET_ITEM(lines, at);
      const int want = expected == Py_None ? -1 : static_cast<int>(PyLong_AsLong(expected));
      const int got = memsnap::python::line_for_instruction(bytes, first_line, static_cast<uint32_t>(at));
      if (got != want) {
        Py_DECREF(items);
        return PyErr_Format(PyExc_AssertionError, "%S instruction %zd: memsnap says line %d, Python %d",
                            PyTuple_GET_ITEM(item, 3), at, got, want);
      }
      ++checked;
    }
  }
  Py_DECREF(items);
  return PyLong_FromLong(checked);
}

PyMethodDef methods[] = {
    {"capture", capture, METH_NOARGS, nullptr},
    {"line_check", line_check, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr},
};
PyModuleDef module = {PyModuleDef_HEAD_INIT, "memsnap_test", nullptr, -1, methods};
PyObject* init_module() { return PyModule_Create(&module); }

class PythonFramesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PyImport_AppendInittab("memsnap_test", init_module);
    Py_Initialize();
    memsnap::python::watch_code_objects();  // (from 3.12; before, frames are told by fingerprint)
    g_frames = new PythonFrames;
  }
  // Runs `source` as the module "frames_test.py"; fails the test on a Python error.
  void run(const std::string& source) {
    g_captures.clear();
    PyObject* code = Py_CompileString(source.c_str(), "frames_test.py", Py_file_input);
    ASSERT_NE(code, nullptr) << python_error();
    globals_ = PyDict_New();
    PyDict_SetItemString(globals_, "__builtins__", PyEval_GetBuiltins());
    PyObject* result = PyEval_EvalCode(code, globals_, globals_);
    Py_DECREF(code);
    ASSERT_NE(result, nullptr) << python_error();
    Py_DECREF(result);
  }
  // A global of the last run, as text.
  std::string global(const char* name) {
    PyObject* value = PyDict_GetItemString(globals_, name);
    if (value == nullptr) return "<missing>";
    PyObject* text = PyObject_Str(value);
    std::string out = PyUnicode_AsUTF8(text);
    Py_DECREF(text);
    return out;
  }
  static std::string python_error() {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    std::string out = "?";
    if (value != nullptr) {
      PyObject* text = PyObject_Str(value);
      out = PyUnicode_AsUTF8(text);
      Py_DECREF(text);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
    return out;
  }
  // "name:line" for each frame of a capture, innermost first.
  static std::string describe(const Capture& capture) {
    std::string out;
    for (const memsnap::SourceFrame& frame : capture.frames)
      out += frame.function + ":" + std::to_string(frame.line) + " ";
    return out;
  }
  PyObject* globals_ = nullptr;
};

TEST_F(PythonFramesTest, NameTheFunctionsFilesAndLinesTracebackNames) {
  ASSERT_TRUE(memsnap::python::frames_supported()) << memsnap::python::frames_unsupported_reason();
  run("import memsnap_test, traceback\n"
      "def inner():\n"
      "    x = 1\n"
      "    got, want = memsnap_test.capture(), traceback.extract_stack()\n"
      "    return got, want\n"
      "def middle():\n"
      "    return inner()\n"
      "class Model:\n"
      "    def forward(self):\n"
      "        return middle()\n"
      "got, want = Model().forward()\n"
      "want = ' '.join(f'{f.name}:{f.lineno}' for f in reversed(want))\n");
  ASSERT_EQ(g_captures.size(), 1u);
  EXPECT_EQ(describe(g_captures[0]), global("want") + " ");
  for (const memsnap::SourceFrame& frame : g_captures[0].frames) EXPECT_EQ(frame.file, "frames_test.py");
}

TEST_F(PythonFramesTest, OneRunPerCppFrameOfTheEvaluationLoop) {
  // Calls through C (map, sorted's key, a generator resumed by next) start runs of their own.
  run("import memsnap_test\n"
      "def leaf(_=None):\n"
      "    return memsnap_test.capture()\n"
      "def gen():\n"
      "    yield leaf()\n"
      "def outer():\n"
      "    a = leaf()\n"
      "    b = list(map(leaf, [1]))[0]\n"
      "    c = sorted([1, 2], key=lambda v: leaf())\n"
      "    d = next(gen())\n"
      "    return a\n"
      "outer()\n");
  ASSERT_EQ(g_captures.size(), 5u);
  for (const Capture& capture : g_captures) {
    EXPECT_GT(capture.run_ends, 0u) << describe(capture);
    EXPECT_EQ(capture.run_ends, capture.loop_frames) << describe(capture);
  }
  EXPECT_GT(g_captures[1].run_ends, g_captures[0].run_ends) << "map's call into leaf is a run of its own";
  EXPECT_EQ(g_captures[4].frames.at(1).function, "gen");
}

// What the recorder asks for with Python frames: the C++ walk ends at the innermost frame of
// the evaluation loop, the frames above being the interpreter's.
TEST_F(PythonFramesTest, AWalkEndsAtTheInnermostFrameOfTheEvaluationLoop) {
  const memsnap::StopCode loop = g_frames->evaluation_loop_code();
  ASSERT_LT(loop.begin, loop.end) << "_PyEval_EvalFrameDefault not found in the dynamic symbols";
  run("import memsnap_test\n"
      "def leaf(_=None):\n"
      "    return memsnap_test.capture()\n"
      "def outer():\n"
      "    return list(map(leaf, [1]))[0]\n"
      "outer()\n");
  ASSERT_EQ(g_captures.size(), 1u);
  const Capture& capture = g_captures[0];
  const auto is_loop = [](uintptr_t address) {
    for (const memsnap::SourceFrame& frame : memsnap::process_symbolizer().frames_at(address))
      if (g_frames->is_evaluation_loop(frame.function)) return true;
    return false;
  };
  ASSERT_GE(capture.cpp_to_loop.size(), 2u);
  ASSERT_LT(capture.cpp_to_loop.size(), capture.cpp.size());
  EXPECT_TRUE(is_loop(capture.cpp_to_loop.back()));
  for (size_t i = 0; i + 1 < capture.cpp_to_loop.size(); ++i) EXPECT_FALSE(is_loop(capture.cpp_to_loop[i])) << i;
  // The same frames as the whole walk up to there (the innermost is each call's own site).
  for (size_t i = 1; i < capture.cpp_to_loop.size(); ++i) EXPECT_EQ(capture.cpp_to_loop[i], capture.cpp[i]) << i;
  EXPECT_GE(capture.loop_frames, 2u) << "map's call into leaf runs the loop again, beyond the end";
}

TEST_F(PythonFramesTest, EachThreadSeesItsOwnFrames) {
  run("import memsnap_test, threading\n"
      "def in_thread():\n"
      "    memsnap_test.capture()\n"
      "t = threading.Thread(target=in_thread)\n"
      "t.start(); t.join()\n"
      "def on_main():\n"
      "    memsnap_test.capture()\n"
      "on_main()\n");
  ASSERT_EQ(g_captures.size(), 2u);
  EXPECT_EQ(g_captures[0].frames.at(0).function, "in_thread");
  EXPECT_EQ(g_captures[0].frames.back().function, "_bootstrap") << describe(g_captures[0]);
  EXPECT_EQ(g_captures[1].frames.at(0).function, "on_main");
  EXPECT_EQ(g_captures[1].frames.back().function, "<module>");
}

TEST(PythonFramesWithoutPython, AThreadThatNeverRanPythonHasNoFrames) {
  PythonFrames frames;
  uintptr_t tokens[8];
  size_t count = 99;
  std::thread([&] { count = frames.capture(tokens, 8); }).join();
  EXPECT_EQ(count, 0u);
}

TEST_F(PythonFramesTest, CodeFreedAndItsAddressReusedStillResolvesToItsOwnName) {
  // Hundreds of functions made and dropped one after another: their code objects come and go
  // at recycled addresses; every capture must still name its own function and line.
  run("import memsnap_test\n"
      "names = []\n"
      "for i in range(300):\n"
      "    src = f'def fn_{i}():\\n' + '\\n' * (i % 7) + '    return memsnap_test.capture()\\n'\n"
      "    ns = {'memsnap_test': memsnap_test}\n"
      "    exec(compile(src, f'gen_{i}.py', 'exec'), ns)\n"
      "    ns[f'fn_{i}']()\n"
      "    names.append(f'fn_{i}')\n"
      "    del ns\n");
  ASSERT_EQ(g_captures.size(), 300u);
  for (size_t i = 0; i < g_captures.size(); ++i) {
    // Resolved again after every code object is gone: the copy kept at first sight answers.
    EXPECT_EQ(g_captures[i].frames.at(0).function, "fn_" + std::to_string(i));
    EXPECT_EQ(g_captures[i].frames.at(0).file, "gen_" + std::to_string(i) + ".py");
    EXPECT_EQ(g_captures[i].frames.at(0).line, 2 + static_cast<int>(i % 7));
  }
}

TEST_F(PythonFramesTest, LineTableReadsAsPythonReadsIt) {
  // Every instruction of a few stdlib modules and of code with odd line layouts.
  run("import memsnap_test, inspect, json.decoder, argparse, textwrap\n"
      "src = 'def f(a,\\n      b):\\n    x = [i\\n     for i in range(a)\\n     if i]\\n' \\\n"
      "      '\\n\\n\\n' + '    y = 1\\n' * 300 + '    try:\\n        z = 1/0\\n    except Exception:\\n        pass\\n' \\\n"
      "      '    return (a +\\n            b)\\n'\n"
      "checked = memsnap_test.line_check(compile(src, 'odd.py', 'exec'))\n"
      "for m in (json.decoder, argparse, textwrap):\n"
      "    checked += memsnap_test.line_check(compile(inspect.getsource(m), m.__file__, 'exec'))\n");
  EXPECT_GT(std::stol(global("checked")), 10000);
}

}  // namespace python_frames_test
