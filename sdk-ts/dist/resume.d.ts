/** The decision a resume invocation carries. */
export type Action = "approve" | "edit" | "reject" | "feedback";
export type JsonObject = {
    [key: string]: unknown;
};
export interface DecidedItem {
    id: string;
    action: Action;
    /** The item as decided: the reviewer's data for an edit, the asked data otherwise. */
    data: JsonObject;
    /** The item's comment; the reviewer's one comment is already copied onto edit, reject and feedback. */
    comment: string | null;
}
export type ResumePayload = {
    hold_id?: string;
    resolved_by?: string;
    items?: {
        id: string;
        action: Action;
        data?: JsonObject | null;
        comment?: string | null;
    }[] | null;
    comment?: string | null;
};
export declare class Resume {
    readonly holdId: string;
    readonly resolvedBy: string;
    readonly decidedItems: DecidedItem[];
    readonly comment: string | null;
    constructor(holdId: string, resolvedBy: string, decidedItems: DecidedItem[], comment: string | null);
    static fromJson(payload: ResumePayload): Resume;
    /** True when nobody decided before the hold's expiry; `decidedItems` is then empty. */
    get expired(): boolean;
    /** Approved or edited items; `data` is as decided, so an edit carries the new values. */
    get approved(): DecidedItem[];
    get edited(): DecidedItem[];
    get rejected(): DecidedItem[];
    get feedback(): DecidedItem[];
    /** The decided item with this id; throws when the hold has no such item. */
    item(id: string): DecidedItem;
}
