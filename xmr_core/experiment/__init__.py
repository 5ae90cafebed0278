"""The experiment layer below the chapters: the data protocols (`protocols`), the recipes (`recipes`), the book's
compared methods (`compared`) and how each is tuned and trained (`training`). Chapter modules import from here,
never from each other."""
