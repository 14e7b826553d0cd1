-- infill.nvim: ghost-text suggestions from `infill lsp` in Neovim 0.7 and later.
--
-- Starts the language server for the configured filetypes, asks it for an inline completion
-- (textDocument/inlineCompletion) when you pause typing in insert mode, and shows the answer as virtual text
-- at the cursor (extmarks). <Tab> accepts it, <M-Right> accepts one word, <M-Down> one line, <C-]> dismisses
-- it; typing what the suggestion says keeps the rest of it without a new request (typeahead).
local M = {}

local ns = vim.api.nvim_create_namespace("infill")

M.config = {
  cmd = { "infill", "lsp" },
  filetypes = { "python", "javascript", "typescript", "go", "rust", "java", "c", "cpp", "lua", "sh" },
  settings = {}, -- sent as initializationOptions (docs/editors.md lists them: model, threshold, ...)
  debounce_ms = 75, -- pause before a request
  keys = { accept = "<Tab>", accept_word = "<M-Right>", accept_line = "<M-Down>", dismiss = "<C-]>" },
  root_markers = { ".git", "pyproject.toml", "package.json", "go.mod", "Cargo.toml" },
}

-- what is on screen: {buf, row (0-based), col (byte: the cursor), text, tick (the buffer's changedtick), from, to}:
-- accepting it puts `text` in place of the line's bytes [from, to), which is the cursor (an insertion) except for
-- a whole line written over the indentation of a blank line (a line that dedents: from < col; the cursor inside
-- that indentation: to > col)
M.state = { suggestion = nil, pending = nil, client_id = nil, requests = 0, timer = nil }

local function has_inline_virt_text()
  return vim.fn.has("nvim-0.10") == 1
end

-- The line of a suggestion drawn by the decoration provider is drawn again (its mark carries no decoration, so
-- setting or clearing it does not ask Neovim to).
local function redraw(s)
  if s and s.first and vim.api.nvim_buf_is_valid(s.buf) then
    local at = vim.api.nvim_buf_get_extmark_by_id(s.buf, ns, s.mark, {})
    local row = at[1] or s.row
    vim.api.nvim__buf_redraw_range(s.buf, row, row + 1)
  end
end

function M.clear()
  redraw(M.state.suggestion)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
    end
  end
  M.state.suggestion = nil
end

local function cancel_pending()
  local pending = M.state.pending
  if pending then
    local client = vim.lsp.get_client_by_id(pending.client_id)
    if client then
      client.cancel_request(pending.id)
    end
    M.state.pending = nil
  end
end

-- Nothing more for the place the cursor is at: no suggestion, no request on its way or waiting for the pause.
local function stop()
  if M.state.timer then
    M.state.timer:stop()
  end
  M.state.rest = nil -- the rest of a part accepted just before <Esc> (no TextChangedI came to show it)
  M.width_back() -- (an accept cut short)
  cancel_pending()
  M.clear()
end

local function insert_mode()
  return vim.api.nvim_get_mode().mode:sub(1, 1) == "i"
end

-- Whether ghost text is out of place now: the completion menu is open (its keys, <Tab> among them, belong to
-- the menu; as Copilot hides its suggestion during completion), 'paste' is set (mappings are off, so no
-- suggestion could be accepted, and pasted text is no place to suggest), or a macro is being recorded or run (a
-- register records the keys typed, not what an accept put in: a replay would type <Tab> where the recording
-- took a suggestion, so none is offered and the replay does what the recording did), or the buffer cannot be
-- changed ('nomodifiable' set while in insert mode: an accept could only fail), or the cursor is where there is
-- no text ('virtualedit' past the end of the line or inside a tab: the server would be asked about the end of the
-- text, and Neovim would fill the gap with blanks before what was shown at that end).
local function hidden()
  return vim.fn.pumvisible() == 1
    or vim.fn.getcurpos()[4] > 0
    or vim.o.paste
    or vim.fn.reg_recording() ~= ""
    or vim.fn.reg_executing() ~= ""
    or not vim.bo.modifiable
end

-- The lines of a suggestion. The server writes the document's own line breaks between them, as Neovim sends its
-- text: "\r\n" with fileformat=dos, "\r" with fileformat=mac; a buffer's lines hold none.
local function split_lines(text)
  return vim.split((text:gsub("\r\n?", "\n")), "\n")
end

-- `text` cut where screen rows of `width` cells end, the first row having been filled up to cell `start` (counted
-- from the start of the line): virtual text is not wrapped by Neovim before 0.10, so a suggestion that runs past
-- the window's edge is shown on the rows below, as the text would be once accepted ('wrap').
local function wrapped(text, start, width)
  local rows, row, used = {}, "", start % width
  for _, char in ipairs(vim.fn.split(text, "\\zs")) do
    local cells = vim.fn.strdisplaywidth(char, used)
    if used + cells > width and (row ~= "" or used > 0) then
      table.insert(rows, row)
      row, used = "", 0
      cells = vim.fn.strdisplaywidth(char, 0)
    end
    row, used = row .. char, used + cells
  end
  table.insert(rows, row)
  return rows
end

local function cursor()
  local pos = vim.api.nvim_win_get_cursor(0)
  return vim.api.nvim_get_current_buf(), pos[1] - 1, pos[2]
end

-- The cells of the current window's text area in a row (its width less the sign, number and fold columns).
local function text_width()
  return vim.api.nvim_win_get_width(0) - vim.fn.getwininfo(vim.api.nvim_get_current_win())[1].textoff
end

-- The cell (from the start of the line) at which the first line of a suggestion begins: after the line and a
-- blank at "eol", else at byte `from`.
local function rows_start(first, line, from)
  return first.virt_text_pos == "eol" and vim.fn.strdisplaywidth(line) + 1
    or vim.fn.strdisplaywidth(line:sub(1, math.min(from, #line)))
end

-- Whether a window of the tab page other than the current one shows `buf` (a split, a float): Neovim before 0.10
-- would draw a suggestion's virtual lines there too.
local function shown_elsewhere(buf)
  local current = vim.api.nvim_get_current_win()
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if win ~= current and vim.api.nvim_win_get_buf(win) == buf then
      return true
    end
  end
  return false
end

-- The first line of a suggestion as `first` (the decoration provider's mark) shows it where nothing may be drawn
-- below the line: its first screen row and a hint of what follows ("… +2 lines"; "…" alone for the rest of a
-- line that wraps), cut so that the hint fits in the window when `start` (the cell the row begins at) is given.
local function shared_view(first, lines, rows, start)
  local more = #lines - 1
  if more == 0 and #rows == 1 then
    return
  end
  local hint = " …" .. (more > 0 and (" +" .. more .. (more == 1 and " line" or " lines")) or "")
  local shown = rows[1]
  if start then
    local used, room = start % text_width(), text_width() - vim.fn.strdisplaywidth(hint)
    local chars = vim.fn.split(shown, "\\zs")
    while #chars > 0 and used + vim.fn.strdisplaywidth(table.concat(chars), used) > room do
      table.remove(chars)
    end
    shown = table.concat(chars)
  end
  first.virt_text = { { shown, "Comment" }, { hint, "NonText" } }
end

-- Show `text` (what would replace bytes [from, to) of the line, by default an insertion at the cursor) as
-- virtual text, in the current window only. Extmarks belong to a buffer, so one shown in two windows (`:split`)
-- is drawn in both; where Neovim has inline virtual text (0.10) the mark carries all of it, and before that the
-- first line is drawn by a decoration provider (draw() below) as an ephemeral mark in the window the suggestion
-- was shown in, at the mark's place (which follows edits). Lines after the first (virtual lines) cannot be
-- ephemeral before 0.10 (Neovim 0.7 does not draw them) and a mark's show in every window of its buffer, so
-- they are placed only while no other window of the tab page shows the buffer; otherwise the first line is
-- shown with a hint of what follows (shared_view), and <Tab> still accepts all of it.
local function render(buf, row, col, text, from, to)
  from, to = from or col, to or col
  redraw(M.state.suggestion)
  vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  if text == "" then
    M.state.suggestion = nil
    return
  end
  local lines = split_lines(text)
  if #lines > 1 and not has_inline_virt_text() and vim.fn.foldclosed(row + 2) ~= -1 then
    -- Neovim 0.7 draws virtual lines above a closed fold as one blank line in place of the fold's line: the
    -- suggestion is its first line there (what is accepted is what is shown)
    lines, text = { lines[1] }, lines[1]
  end
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  local first = { virt_text = { { lines[1], "Comment" } }, hl_mode = "combine" }
  if from < col or to > col then
    first.virt_text_pos = "overlay" -- over the blank line's indentation, which it replaces
  elseif has_inline_virt_text() then
    first.virt_text_pos = "inline"
  elseif col >= #line then
    first.virt_text_pos = "overlay"
  else
    first.virt_text_pos = "eol" -- text after the cursor: Neovim before 0.10 cannot show text inside a line
  end
  local rows = { lines[1] } -- the first line's screen rows
  if not has_inline_virt_text() and vim.wo.wrap and vim.fn.foldclosed(row + 2) == -1 then
    local width = text_width()
    rows = width > 0 and wrapped(lines[1], rows_start(first, line, from), width) or rows
  end
  first.virt_text[1][1] = rows[1]
  local opts = has_inline_virt_text() and first or {}
  local extra = {}
  local shared = not has_inline_virt_text() and shown_elsewhere(buf)
  if shared then
    shared_view(first, lines, rows, vim.wo.wrap and rows_start(first, line, from))
  else
    for i = 2, #rows do
      table.insert(extra, { { rows[i], "Comment" } })
    end
    for i = 2, #lines do
      table.insert(extra, { { lines[i], "Comment" } })
    end
  end
  if #extra > 0 then
    opts.virt_lines = extra
  end
  local mark = vim.api.nvim_buf_set_extmark(buf, ns, row, math.min(from, #line), opts)
  local tick = vim.api.nvim_buf_get_changedtick(buf)
  M.state.suggestion = {
    buf = buf,
    row = row,
    col = col,
    text = text,
    tick = tick,
    from = from,
    to = to,
    win = vim.api.nvim_get_current_win(),
    mark = mark,
    first = not has_inline_virt_text() and first or nil,
    block = not has_inline_virt_text() and #extra > 0, -- virtual lines placed: drawn in every window of the buffer
    shared = shared, -- shown beside another window of the buffer (its first line and a hint)
  }
  redraw(M.state.suggestion)
end

-- The decoration provider's part (Neovim before 0.10): the first line of the suggestion, in its window only.
local function draw_in(win, buf)
  local s = M.state.suggestion
  return s ~= nil and s.first ~= nil and s.win == win and s.buf == buf
end

local function draw_line(_, win, buf, row)
  local s = M.state.suggestion
  if not draw_in(win, buf) then
    return
  end
  local at = vim.api.nvim_buf_get_extmark_by_id(buf, ns, s.mark, {})
  if at[1] == row then
    local opts = vim.tbl_extend("force", s.first, { ephemeral = true })
    vim.api.nvim_buf_set_extmark(buf, ns, row, at[2], opts)
  end
end

-- The suggestion shown again where the windows of its buffer changed since it was shown (before 0.10): a window
-- other than its own about to draw its virtual lines (a float or a split of the buffer opened by a plugin while
-- it shows, which no WinLeave announced: after this redraw, as marks placed during one redraw it anew), or the
-- other windows of the buffer closed (the whole block again).
local function reshow()
  local s = M.state.suggestion
  local buf, row, col = cursor()
  local here_now = s and s.win == vim.api.nvim_get_current_win() and s.buf == buf and s.row == row and s.col == col
  if here_now and s.first and s.shared ~= shown_elsewhere(buf) then
    if vim.api.nvim_buf_get_changedtick(buf) == s.tick then
      render(buf, row, col, s.text, s.from, s.to)
    end
  end
end

vim.api.nvim_set_decoration_provider(ns, {
  on_win = function(_, win, buf)
    local s = M.state.suggestion
    if s and s.block and s.buf == buf and s.win ~= win and not s.reshow then
      s.reshow = true
      vim.schedule(reshow)
    end
    return draw_in(win, buf)
  end,
  on_line = draw_line,
})

-- Positions: Neovim counts bytes; the server counts in the encoding the two agreed on at start-up
-- (client.offset_encoding: UTF-8 where the server took the plugin's offer, else UTF-16 or UTF-32).
local function encoding_of(client)
  return client.offset_encoding or "utf-16"
end

-- Neovim 0.11 changed the signatures of vim.str_utfindex and vim.str_byteindex (encoding first).
local new_index_api = vim.fn.has("nvim-0.11") == 1

-- The character index, in the client's encoding, of byte `col` of `line`.
local function lsp_character(client, line, col)
  local encoding = encoding_of(client)
  col = math.min(col, #line)
  if encoding == "utf-8" then
    return col
  end
  if new_index_api then
    return vim.str_utfindex(line, encoding, col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, col)
  return encoding == "utf-32" and utf32 or utf16
end

-- The byte of `line` at character index `character` in the client's encoding.
local function byte_col(client, line, character)
  local encoding = encoding_of(client)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  if new_index_api then
    return vim.str_byteindex(line, encoding, character, false)
  end
  local ok, byte = pcall(vim.str_byteindex, line, character, encoding == "utf-16")
  return ok and byte or #line
end

-- The first item of an answer as (text, from, to): the text to put in place of the line's bytes [from, to).
-- Its range may start before the cursor: at the start of a blank line (a whole line, indentation included) or of
-- a word the server healed. When the text begins with what is there, that part is dropped and the rest is an
-- insertion at the cursor; a whole line with other indentation (a line that dedents) replaces the blank
-- line's; anything else is not shown.
local function item_text(client, buf, row, col, item)
  local text = item.insertText
  if type(text) == "table" then
    text = text.value
  end
  if type(text) ~= "string" then
    return nil
  end
  text = text:gsub("\r\n?", "\n") -- one kind of line break from here on (split_lines)
  local range = item.range
  if range and range.start.line == row then
    local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
    local start = byte_col(client, line, range.start.character)
    local stop = range["end"].line == row and byte_col(client, line, range["end"].character) or col
    stop = math.max(stop, col)
    local typed = line:sub(start + 1, col)
    if text:sub(1, #typed) == typed then
      -- blanks after the cursor that the answer writes over (the cursor inside a blank line's indentation) go
      -- with it: left in place they would trail the accepted line
      local over = start <= col and line:sub(col + 1, stop):match("^%s*$") and stop or col
      return text:sub(#typed + 1), col, over
    end
    if start < col and line:sub(start + 1, stop):match("^%s*$") then
      return text, start, stop
    end
    return nil
  end
  return text, col, col
end

function M.request()
  local client = M.state.client_id and vim.lsp.get_client_by_id(M.state.client_id)
  local buf, row, col = cursor()
  if not client or not vim.lsp.buf_is_attached(buf, client.id) or not insert_mode() or hidden() then
    return -- a pause timer that fired after <Esc>: no ghost text in normal mode
  end
  if not vim.tbl_contains(M.config.filetypes, vim.bo[buf].filetype) then
    return -- a buffer whose filetype was changed (:set ft=markdown) since it was attached: as Copilot, the
    -- filetype now in force says
  end
  cancel_pending()
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    position = { line = row, character = lsp_character(client, line, col) },
    context = { triggerKind = 2 },
  }
  local tick = vim.api.nvim_buf_get_changedtick(buf)
  local win = vim.api.nvim_get_current_win()
  M.state.requests = M.state.requests + 1
  local ok, id
  ok, id = client.request("textDocument/inlineCompletion", params, function(err, result)
    local pending = M.state.pending
    if not pending or pending.id ~= id then
      return -- cancelled (dismissed, insert mode left, a newer request) but answered before the cancel arrived
    end
    M.state.pending = nil
    M.state.last = { err = err, result = result } -- the last answer, for :lua print(vim.inspect(...))
    local b, r, c = cursor()
    local moved = b ~= buf or r ~= row or c ~= col or vim.api.nvim_get_current_win() ~= win
    if err or not result or moved or vim.api.nvim_buf_get_changedtick(buf) ~= tick then
      return -- an error, or the buffer or the cursor moved on: the next pause asks again
    end
    if not insert_mode() or hidden() then
      return
    end
    local items = result.items or result
    local text, from, to
    if items[1] then
      text, from, to = item_text(client, buf, row, col, items[1])
    end
    if text then
      render(buf, row, col, text, from, to)
    end
  end, buf)
  if ok then
    M.state.pending = { client_id = client.id, id = id }
  end
end

-- After a keystroke: keep the suggestion if what was typed is what it says (typeahead), else ask again after
-- a pause.
function M.on_change()
  if hidden() then
    stop()
    return
  end
  local buf, row, col = cursor()
  local rest = M.state.rest
  M.state.rest = nil
  if rest and rest.buf == buf and rest.row == row and rest.col == col then
    render(buf, row, col, rest.text) -- the part of a suggestion not accepted, where the accepted part ends
    return
  end
  local s = M.state.suggestion
  local same = s and s.buf == buf and s.win == vim.api.nvim_get_current_win() and s.row == row
  if same and col >= s.col and (s.from or s.col) == s.col then
    local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
    local typed = line:sub(s.col + 1, col)
    if s.text:sub(1, #typed) == typed and #typed < #s.text then
      render(buf, row, col, s.text:sub(#typed + 1), col, col + (s.to or s.col) - s.col) -- the blanks it replaces moved
      return
    end
  end
  M.clear()
  if M.state.timer then
    M.state.timer:stop()
  end
  M.state.timer = M.state.timer or vim.loop.new_timer()
  M.state.timer:start(M.config.debounce_ms, 0, vim.schedule_wrap(M.request))
end

-- Keys that take away what Neovim put on a line a <CR> began ('autoindent', a comment leader of 'formatoptions':
-- a suggestion's lines carry their own), whatever it put there, so that a `.` elsewhere does the same: <C-U>
-- deletes back to the indentation (after an `x`: at the start of a line it would join the line to the one
-- above), `0 <C-D>` deletes the indentation.
local FRESH_LINE = "x<C-U>0<C-D>"

-- Put `text` in place of the cursor line's bytes [from, to) (by default: insert it at the cursor); the cursor
-- goes to its end, where `rest` (the part not accepted) is then shown. The bytes it replaces (blanks) go first.
-- The text is typed into the insert, as Copilot's is (once the mapping has returned), so that one `u` takes it
-- away with the insert and `.` repeats it: each line through the expression register with <C-R><C-R>
-- (literally, as copilot.vim's accept), and between lines a <CR> and FRESH_LINE; `.` repeats these keys. In
-- Replace mode (<Insert>, R, gR) keys typed write over the text after the cursor, so the text goes in between two
-- <Insert> keys (to Insert mode and back), which inserts, as copilot.vim's accept does there (with <C-R><C-O>,
-- which left `.` stuck at the expression register's prompt). 'textwidth' and 'wrapmargin' are off while it goes
-- in: it goes in as shown, as copilot.vim's does (a line of code broken where the width ends is not what was
-- shown); a `.` types it as a person would.
local function insert(text, from, to, rest)
  local buf, row, col = cursor()
  from, to = from or col, to or col
  local lines = split_lines(text)
  if text == "" then
    return
  end
  if from ~= col or to ~= col then
    vim.api.nvim_buf_set_text(buf, row, from, row, to, { "" })
    vim.api.nvim_win_set_cursor(0, { row + 1, from })
  end
  M.state.inserted = lines
  local last_row = row + #lines - 1
  local last_col = (#lines == 1 and from or 0) + #lines[#lines]
  M.state.rest = rest and rest ~= "" and { buf = buf, row = last_row, col = last_col, text = rest } or nil
  local toggle = vim.api.nvim_get_mode().mode:sub(1, 1) == "R" and "<Insert>" or ""
  M.state.width = M.state.width
    or { buf = buf, textwidth = vim.bo[buf].textwidth, wrapmargin = vim.bo[buf].wrapmargin, showcmd = vim.o.showcmd }
  vim.bo[buf].textwidth, vim.bo[buf].wrapmargin = 0, 0
  -- 'showcmd' off too: its column beside the expressions typed below overflowed the one-line command area of
  -- a screen 36-49 columns wide, and an <Esc> after the accept stopped at a "Press ENTER" prompt
  vim.o.showcmd = false
  local keys = { toggle }
  for i, line in ipairs(lines) do
    if i > 1 then
      table.insert(keys, "<CR>" .. FRESH_LINE)
    end
    if line ~= "" then
      table.insert(keys, "<C-R><C-R>=v:lua.require'infill'.inserted(" .. i .. ")<CR>")
    end
  end
  table.insert(keys, toggle .. "<C-R>=v:lua.require'infill'.width_back()<CR>") -- once the text is in
  -- first in the typeahead (keys typed after the accept go after it), not remapped
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(table.concat(keys), true, false, true), "ni", false)
end

-- 'textwidth' and 'wrapmargin' as they were before an accept (an expression register's, which inserts nothing).
function M.width_back()
  local held = M.state.width
  M.state.width = nil
  if held then
    vim.o.showcmd = held.showcmd
  end
  if held and vim.api.nvim_buf_is_valid(held.buf) then
    vim.bo[held.buf].textwidth, vim.bo[held.buf].wrapmargin = held.textwidth, held.wrapmargin
  end
  return ""
end

-- Line `i` of the text the last accept put in (the expression register's).
function M.inserted(i)
  return M.state.inserted and M.state.inserted[i or 1] or ""
end

-- The suggestion on screen, if it is still where the cursor is (it belongs to that place only).
local function here()
  local s = M.state.suggestion
  if not s then
    return nil
  end
  local buf, row, col = cursor()
  local elsewhere = s.buf ~= buf or s.win ~= vim.api.nvim_get_current_win() or s.row ~= row or s.col ~= col
  if elsewhere or not vim.api.nvim_buf_is_valid(buf) or hidden() then
    M.clear()
    return nil
  end
  return s
end

-- The cursor moved: a suggestion left behind (arrow keys, a mouse click) is taken away, as the answer to a
-- request for the old place is. A move that comes with a change (a key typed: Neovim runs CursorMovedI before
-- TextChangedI) is left to on_change, which keeps the suggestion when the key typed what it says.
function M.on_move()
  local s = M.state.suggestion
  if s and vim.api.nvim_buf_is_valid(s.buf) and vim.api.nvim_buf_get_changedtick(s.buf) ~= s.tick then
    return
  end
  if s and not here() then
    cancel_pending()
  end
end

-- Accept the whole suggestion; false when there is none (the key then does what it did before).
function M.accept()
  local s = here()
  if not s then
    return false
  end
  M.clear()
  insert(s.text, s.from, s.to)
  return true
end

-- Accept the part of the suggestion `take(text)` says; the rest stays shown.
local function accept_part(take)
  local s = here()
  if not s then
    return false
  end
  local part = take(s.text)
  local rest = s.text:sub(#part + 1)
  M.clear()
  insert(part, s.from, s.to, rest)
  return true
end

-- Accept up to the end of the next word (leading spaces included). Bytes of multi-byte characters count as
-- word bytes (Lua's %w is ASCII only): a word never ends inside a character.
function M.accept_word()
  return accept_part(function(text)
    return text:match("^%s*[%w_\128-\255]+") or text:match("^%s*[^%w_%s\128-\255]") or text:match("^%s+") or text
  end)
end

-- Accept up to the end of the suggestion's current line; at its end, the line break and the next line.
function M.accept_line()
  return accept_part(function(text)
    return text:match("^[^\r\n]+") or text:match("^\r?\n[^\r\n]*") or text
  end)
end

function M.suggestion()
  return M.state.suggestion and M.state.suggestion.text or nil
end

-- Insert-mode mappings the plugin's keys took over (the user's own: a snippet jump, <C-n> for a menu...), by the
-- key they are on. A key does what its earlier mapping did when there is no suggestion, as copilot.vim's <Tab>
-- falls back; a setup run again finds only the plugin's own mapping and keeps the earlier one.
local earlier = {}

local function termcodes(keys)
  return vim.api.nvim_replace_termcodes(keys, true, false, true)
end

-- The global insert-mode mapping of `key` (in termcodes) that is not the plugin's.
local function mapping_of(key)
  for _, m in ipairs(vim.api.nvim_get_keymap("i")) do
    if termcodes(m.lhs) == key and m.desc ~= "infill" then
      return m
    end
  end
  return nil
end

-- Do what `key` did before the plugin mapped it: its earlier mapping's work, else the key itself. The keys go
-- first in the typeahead (keys typed after it come after them); a mapping's keys are mapped again unless it was
-- a noremap one or they begin with the key itself (as Vim does not map again a rhs that begins with its lhs).
local function fallback(key)
  local m = earlier[key]
  local keys = key
  if m then
    if m.callback then
      keys = m.callback()
      if m.expr ~= 1 then
        return -- a function mapping did its work
      end
      if m.replace_keycodes == 1 and type(keys) == "string" then
        keys = termcodes(keys)
      end
    elseif m.expr == 1 then
      local ok, value = pcall(vim.api.nvim_eval, m.rhs)
      keys = ok and value or nil
    else
      keys = termcodes(m.rhs)
    end
    if type(keys) ~= "string" or keys == "" then
      return
    end
  end
  local remap = m and m.noremap ~= 1 and keys:sub(1, #key) ~= key
  vim.api.nvim_feedkeys(keys, remap and "mi" or "ni", false)
end

local function map(lhs, fn)
  if not lhs or lhs == "" then
    return
  end
  local key = termcodes(lhs)
  earlier[key] = mapping_of(key) or earlier[key]
  vim.keymap.set("i", lhs, function()
    if not fn() then
      fallback(key)
    end
  end, { silent = true, desc = "infill" })
end

local function root_dir(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  local found = vim.fs and vim.fs.find and vim.fs.find(M.config.root_markers, { upward = true, path = name })[1]
  return found and vim.fn.fnamemodify(found, ":h") or vim.fn.getcwd()
end

function M.attach(buf)
  if not M.state.client_id or not vim.lsp.get_client_by_id(M.state.client_id) then
    M.state.client_id = vim.lsp.start_client({
      name = "infill",
      cmd = M.config.cmd,
      root_dir = root_dir(buf),
      init_options = M.config.settings,
      flags = { debounce_text_changes = 0 },
      -- UTF-8 positions are Neovim's own byte columns; Neovim before 0.10 takes the encoding from here, later
      -- ones from the server's answer (which takes the first of these it supports)
      capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(), {
        general = { positionEncodings = { "utf-8", "utf-16" } },
      }),
      offset_encoding = "utf-8",
      -- a server that dies (killed, crashed) is told once, with the way back; typing goes on without it
      on_exit = function(code, signal)
        if code ~= 0 or signal ~= 0 then
          vim.schedule(function()
            stop()
            local why = signal ~= 0 and ("signal " .. signal) or ("exit code " .. code)
            vim.notify("infill: the language server stopped (" .. why .. "); :edit a file to start it again",
              vim.log.levels.WARN)
          end)
        end
      end,
    })
  end
  if M.state.client_id and not M.shares_uri(buf) then
    vim.lsp.buf_attach_client(buf, M.state.client_id)
  end
end

-- Whether another buffer the server has open has this buffer's URI: every unnamed buffer is "file://" to
-- Neovim's LSP client, so a second one would replace the first one's text on the server (whose suggestions
-- would then come from the other buffer, and whose changes would land in the wrong text). The first unnamed
-- buffer keeps its suggestions; a second gets none until it has a name.
function M.shares_uri(buf)
  local uri = vim.uri_from_bufnr(buf)
  for _, other in ipairs(vim.api.nvim_list_bufs()) do -- (the client's own list is empty until it is initialized)
    if other ~= buf and vim.lsp.buf_is_attached(other, M.state.client_id) and vim.uri_from_bufnr(other) == uri then
      return true
    end
  end
  return false
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  local group = vim.api.nvim_create_augroup("infill", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd({ "TextChangedI", "TextChangedP" }, { group = group, callback = M.on_change })
  -- entering insert mode (i, a, A, o, cc, S...) asks after the same pause, as Copilot does: Neovim's
  -- TextChangedI comes then only when the buffer changed in normal mode since the last insert, so `A` at the end
  -- of a line asked or not depending on what was done before
  -- (a fresh insert: a suggestion still shown belongs to the one before, as when `:normal A<Tab>` runs from a
  -- timer of another plugin while you are in insert mode, where no InsertLeave came first)
  vim.api.nvim_create_autocmd("InsertEnter", {
    group = group,
    callback = function()
      stop()
      M.on_change()
    end,
  })
  vim.api.nvim_create_autocmd("CursorMovedI", { group = group, callback = M.on_move })
  vim.api.nvim_create_autocmd("WinClosed", { group = group, callback = vim.schedule_wrap(reshow) }) -- (once closed)
  -- (WinLeave: a suggestion belongs to its window, whose cursor it is at; the same buffer in another window has a
  -- cursor of its own)
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave", "WinLeave", "CompleteChanged" }, {
    group = group,
    callback = stop,
  })
  map(M.config.keys.accept, M.accept)
  map(M.config.keys.accept_word, M.accept_word)
  map(M.config.keys.accept_line, M.accept_line)
  map(M.config.keys.dismiss, function()
    local had = M.state.suggestion ~= nil
    stop() -- a request on its way is dismissed too: its answer would show what was just dismissed
    return had
  end)
end

return M
