//! Reading `text/event-stream` as the HTML standard defines it: lines of `field: value`, an
//! empty line ends a frame, `:` starts a comment (the server's keep-alive). Bytes arrive
//! in pieces cut anywhere, even inside a UTF-8 character; frames come out whole.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Collects bytes and yields the frames they complete.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The frame being read, and whether it has any field yet.
    frame: Frame,
    started: bool,
    /// The last byte was `\r`: a `\n` right after it ends no second line.
    after_cr: bool,
}

impl Parser {
    /// Frames that `bytes` completes, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(frame) = self.line_ended(&line) {
                        frames.push(frame);
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
        frames
    }

    fn line_ended(&mut self, line: &[u8]) -> Option<Frame> {
        if line.is_empty() {
            if !self.started {
                return None;
            }
            self.started = false;
            let mut frame = std::mem::take(&mut self.frame);
            if frame.data.ends_with('\n') {
                frame.data.pop();
            }
            return Some(frame);
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "id" => self.frame.id = Some(value.to_owned()),
            "event" => self.frame.event = Some(value.to_owned()),
            "data" => {
                self.frame.data.push_str(value);
                self.frame.data.push('\n');
            }
            // `retry` and unknown fields: nothing a reader here needs.
            _ => return None,
        }
        self.started = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: &str, event: &str, data: &str) -> Frame {
        Frame { id: Some(id.into()), event: Some(event.into()), data: data.into() }
    }

    #[test]
    fn frames_end_at_an_empty_line_and_comments_are_skipped() {
        let mut parser = Parser::default();
        let text =
            ": keep-alive\n\nid: 7\nevent: job.progress\ndata: {\"a\":1}\n\nid: 8\nevent: x\ndata: a\ndata: b\n\n";
        assert_eq!(
            parser.push(text.as_bytes()),
            vec![frame("7", "job.progress", "{\"a\":1}"), frame("8", "x", "a\nb")]
        );
    }

    #[test]
    fn pieces_cut_anywhere_give_the_same_frames() {
        let text = "id: 1\r\nevent: é\r\ndata: ü\r\n\r\nid: 2\rdata: z\r\r";
        let whole = Parser::default().push(text.as_bytes());
        assert_eq!(whole, vec![frame("1", "é", "ü"), Frame { id: Some("2".into()), event: None, data: "z".into() }]);
        for cut in 0..text.len() {
            let mut parser = Parser::default();
            let mut frames = parser.push(&text.as_bytes()[..cut]);
            frames.extend(parser.push(&text.as_bytes()[cut..]));
            assert_eq!(frames, whole, "cut at {cut}");
        }
    }

    #[test]
    fn an_unfinished_frame_is_not_given() {
        let mut parser = Parser::default();
        assert!(parser.push(b"id: 1\ndata: x\n").is_empty());
        assert_eq!(parser.push(b"\n").len(), 1);
    }
}
