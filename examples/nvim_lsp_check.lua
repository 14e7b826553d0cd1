-- A check of `infill lsp` in a real editor, headless (docs/editors.md says what it showed):
--
--   INFILL_LSP_PLUGINS=fixtures_lsp:install PYTHONPATH=.:tests \
--     nvim --headless -u NONE -c "luafile examples/nvim_lsp_check.lua"
--
-- Works with Neovim 0.7 and later (no plugins). It writes a small Python file in a temporary folder, starts the
-- server with Neovim's own LSP client, types into the buffer (incremental didChange), asks for a completion and
-- applies its edit, asks for an inline completion, runs the "Fill selection" and "Add docstring" code actions
-- (applied by Neovim's workspace/applyEdit handler), compares the server's copy of the document with the buffer
-- (the tests' plugin request test/document, when INFILL_LSP_PLUGINS loads it), and prints what it saw.
-- $INFILL_PYTHON names the interpreter to run `python -m infill lsp` with (default: python3).

local function say(...)
  io.stdout:write(table.concat(vim.tbl_map(tostring, { ... }), " ") .. "\n")
end

local folder = vim.fn.tempname()
vim.fn.mkdir(folder, "p")
local path = folder .. "/stats.py"
vim.fn.writefile({
  "def mean(values):",
  "    total = sum(values)",
  "    return total / len(values)",
  "",
  "",
  "def variance(values):",
  "    m = mean(values)",
  "    return sum((v - m) ** 2 for v in values) / len(values)",
}, path)
vim.cmd("edit " .. path)
local buf = vim.api.nvim_get_current_buf()
local uri = vim.uri_from_bufnr(buf)
local id = vim.lsp.start_client({
  name = "infill",
  cmd = { os.getenv("INFILL_PYTHON") or "python3", "-m", "infill", "lsp" },
  root_dir = folder,
  init_options = { threshold = 0 }, -- every fill that passes the checks: this checks the protocol, not the model
})
vim.lsp.buf_attach_client(buf, id)
local client
vim.wait(120000, function()
  client = vim.lsp.get_client_by_id(id)
  return client ~= nil and client.initialized
end, 100)
local version = vim.version()
say("nvim", version.major .. "." .. version.minor .. "." .. version.patch, "position encoding", client.offset_encoding)
local caps = client.server_capabilities
say("server: completion", caps.completionProvider ~= nil, "code actions", caps.codeActionProvider ~= nil,
  "inline completion", caps.inlineCompletionProvider ~= nil, "sync", caps.textDocumentSync.change)

-- type a new line in variance(): "    squares = " and complete it where insert mode's cursor is
vim.api.nvim_buf_set_lines(buf, 7, 7, false, { "    squares = " })
local position = { line = 7, character = 14 }
local responses = vim.lsp.buf_request_sync(buf, "textDocument/completion", { textDocument = { uri = uri }, position = position }, 120000)
for _, response in pairs(responses or {}) do
  local items = response.result and (response.result.items or response.result) or {}
  for _, item in ipairs(items) do
    local words = vim.lsp.util.text_document_completion_list_to_complete_items(response.result, "")
    say("completion item", vim.inspect(item.label), "omnifunc word", vim.inspect(words[1] and words[1].word))
    vim.lsp.util.apply_text_edits({ item.textEdit }, buf, client.offset_encoding)
  end
  if response.err then say("completion error", vim.inspect(response.err)) end
end
say("line after the completion:", vim.inspect(vim.api.nvim_buf_get_lines(buf, 7, 8, false)[1]))

-- an inline completion on a new blank line (Neovim before 0.12 shows no ghost text; the answer is printed)
vim.api.nvim_buf_set_lines(buf, 8, 8, false, { "    " })
local inline = vim.lsp.buf_request_sync(buf, "textDocument/inlineCompletion",
  { textDocument = { uri = uri }, position = { line = 8, character = 4 }, context = { triggerKind = 1 } }, 120000)
for _, response in pairs(inline or {}) do say("inline completion", vim.inspect(response.err or response.result)) end
vim.api.nvim_buf_set_lines(buf, 8, 9, false, {})

local told = 0 -- window/showMessage from the server while an action runs (what went wrong)
local show_message = vim.lsp.handlers["window/showMessage"]
vim.lsp.handlers["window/showMessage"] = function(err, result, ctx, config)
  told = told + 1
  say("server message:", result.message)
  return show_message(err, result, ctx, config)
end

local function actions_at(range)
  local found = {}
  local answers = vim.lsp.buf_request_sync(buf, "textDocument/codeAction",
    { textDocument = { uri = uri }, range = range, context = { diagnostics = {} } }, 60000)
  for _, response in pairs(answers or {}) do
    for _, action in ipairs(response.result or {}) do table.insert(found, action) end
  end
  return found
end

-- the code actions: fill the selected `total = sum(values)`, then add mean()'s docstring
local selection = { start = { line = 1, character = 4 }, ["end"] = { line = 1, character = 23 } }
local cursor = { start = { line = 1, character = 4 }, ["end"] = { line = 1, character = 4 } }
for _, step in ipairs({ { selection, "Fill selection with infill" }, { cursor, "Add docstring to mean (infill)" } }) do
  for _, action in ipairs(actions_at(step[1])) do
    say("action offered:", action.title)
    if action.title == step[2] then
      local before = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
      local done, failed = false, false
      told = 0
      client.request("workspace/executeCommand", action.command, function(err)
        say("ran", vim.inspect(step[2]), "error", vim.inspect(err))
        done, failed = true, err ~= nil
      end, buf)
      vim.wait(180000, function() return done end, 50)
      -- answered once the fill started: its edit (workspace/applyEdit) comes when it is done, or a message says
      -- why none does
      local function changed() return before ~= table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") end
      vim.wait(180000, function() return changed() or told > 0 or failed end, 50)
      say("buffer changed:", changed())
    end
  end
end
say("the buffer now:")
say(table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))

local copy = client.request_sync("test/document", { uri = uri }, 10000, buf)
if copy and copy.result then
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") .. "\n"
  say("the server's copy equals the buffer:", copy.result.text == text, "at version", copy.result.version)
end
client.stop()
vim.wait(20000, function() return vim.lsp.client_is_stopped(id) end, 100)
say("server stopped:", vim.lsp.client_is_stopped(id))
vim.cmd("qa!")
